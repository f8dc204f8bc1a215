"""Process launch and the serving front ends (chapter 02)."""
