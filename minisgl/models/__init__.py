"""Model definitions, weight loading, and the embedded default model (`default_model`) (chapter 04)."""
