"""`patchkeeper mcp`: the verbs as tools of a Model Context Protocol server over stdio (docs/agents.md)."""
