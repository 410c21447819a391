"""The coder: renders kernel candidates from templates, searches their configs, concludes a target."""
