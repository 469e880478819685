"""Agent integrations: hook handlers and installers, one module per agent."""
