"""Tools: sandboxed python, retrieval, user functions; `ToolBox` runs them by name."""
