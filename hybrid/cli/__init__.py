"""The `hybrid` command. Each subcommand lives in hybrid/cli/commands/<name>.py."""
