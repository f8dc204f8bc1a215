"""The server: its arguments, its launch, the HTTP API and the shell (chapter 02)."""
