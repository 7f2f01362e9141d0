"""The Textual dashboard that `sapo-edge` opens (the only package that imports textual)."""
