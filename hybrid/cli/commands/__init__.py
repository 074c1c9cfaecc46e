"""One module per subcommand; each defines `command` (a click.Command). Discovered by hybrid.cli.main."""
