"""``python -m launcher.docsgen [--check]``: write the generated reference pages, or check them."""

from __future__ import annotations

import argparse
import sys

from launcher.docsgen import PAGES, stale_pages, write_pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.docsgen",
                                     description="Write docs/reference/ from the key table and the parser.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a generated page is out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages()
        for name in stale:
            print(f"{name} is out of date: run `python -m launcher.docsgen` (or `make docs`)", file=sys.stderr)
        return 1 if stale else 0
    written = write_pages()
    for name in PAGES:
        print(f"{'wrote' if name in written else 'up to date'} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
