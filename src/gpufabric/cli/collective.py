"""CLI: collective and validate commands (see gpufabric.collectives)."""
