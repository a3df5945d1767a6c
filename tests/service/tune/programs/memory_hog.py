"""A trial that needs more memory than its cap: allocates 2 GiB, as a layout too large for its GPU would."""

buffer = bytearray(2 << 30)
print(len(buffer))
