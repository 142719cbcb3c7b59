"""``python -m verifier``: the verifier's CLI, runnable alone."""

from verifier.cli import main

if __name__ == "__main__":
    main()
