"""Built-in backends, installed as `kvscribe.backends`; each registers through the
`kvscribe.backends` entry-point group exactly as a third-party plugin would."""
