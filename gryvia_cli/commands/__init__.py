"""The command groups; each module's `register` adds its subcommands to the parser."""
