"""The certificate generator's errors: one tree under ``CertsError``.

Each class is defined next to the code that raises it (module in parentheses):

    CertsError             anything the generator raises of its own
    └── RenderError        (manifest) a ValueError: a manifest template and its values do not match
"""


class CertsError(Exception):
    """Anything the certificate generator raises of its own."""
