"""Settings: the Config every run takes, its checks (each refusal a sentence with the fix), the
presets, the errors a user fixes by retyping, and the `hub:` mark of a class's model."""
