"""Text in: transcript parsers and redaction. Depends only on the model."""
