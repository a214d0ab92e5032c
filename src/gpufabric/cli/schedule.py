"""CLI: schedule command (see gpufabric.scheduler)."""
