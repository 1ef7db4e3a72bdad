"""``python -m ctxbench`` and the ``ctxbench`` command. ``ctxbench --version`` answers here, before the
CLI loads (typer, rich, the task registry and numpy: about a second), so it costs only Python's start."""

import sys

from ctxbench.version import __version__


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"ctxbench {__version__}\n")
        return
    from ctxbench.cli import main as cli_main  # start-up: loads numpy, rich, typer

    cli_main()


if __name__ == "__main__":
    main()
