"""mkdocs hooks (mkdocs.yml ``hooks:``): the CLI reference is generated from the parsers at build time.

``docs/cli.md`` holds a marker that :func:`on_page_markdown` replaces by every ``hezk`` command's help, taken
from the same ``argparse`` objects the console script runs, so the page cannot drift from the code.
"""
from __future__ import annotations

import argparse

MARKER = "<!-- cli-reference -->"
WIDTH = 80  # help text width: the same page on every terminal, and no scrolling in the content column


def cli_parser() -> argparse.ArgumentParser:
    """The ``hezk`` console script's parser (the one place the docs name the CLI's module)."""
    from hezk.cli import build_parser

    return build_parser()


def subcommands(parser: argparse.ArgumentParser) -> dict:
    """{name: (one-line help, subparser)} of a parser's subcommands, in the order they were added."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return {name: (helps.get(name) or "", sub) for name, sub in action.choices.items()}


def _help(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    return parser.format_help().rstrip()


def _cell(text: str) -> str:
    """One table cell: no pipe or newline breaks the row."""
    return " ".join(text.split()).replace("|", "\\|")


def render(parser: argparse.ArgumentParser) -> str:
    """Markdown: a table of the commands, then each command's full help."""
    commands = subcommands(parser)
    lines = ["| command | what it does |", "| --- | --- |"]
    for name, (text, _) in commands.items():
        lines.append(f"| [`{parser.prog} {name}`](#{parser.prog}-{name}) | {_cell(text)} |")
    lines += ["", f"## {parser.prog}", "", "```text", _help(parser), "```"]
    for name, (_, sub) in commands.items():
        lines += ["", f"## {parser.prog} {name}", "", "```text", _help(sub), "```"]
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, render(cli_parser()))
    return markdown
