"""The vault: opening it with a checked key, the transaction, migrations, key sources."""
