"""The rules: one small function per rule (see registry.py); `recipe-advisor validate --list-rules`."""
