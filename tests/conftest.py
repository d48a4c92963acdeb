"""Shared test configuration: hypothesis profiles (quick by default, thorough with HYPOTHESIS_PROFILE=ci-slow)."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

try:  # in-process Dask workers (processes=False) sample sys._current_frames() every 10 ms for their profiler: on
    import dask  # CPython 3.11 a garbage collection inside that call can deadlock the test process (a run hung so)

    dask.config.set({"distributed.worker.profile.enabled": False})
except ImportError:
    pass
