"""The SDK API version: bumped when the Backend contract changes incompatibly."""

#: The API version this SDK defines; a backend declares the one it targets.
SDK_API_VERSION = 1
#: The API versions this core can load.
SUPPORTED_SDK_API_VERSIONS = frozenset({1})
