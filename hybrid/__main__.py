"""`python -m hybrid` is the `hybrid` command (for environments whose scripts folder is not on PATH)."""
from hybrid.cli.main import main

if __name__ == "__main__":
    main()
