#!/bin/sh
echo "bazel coverage is not supported offline (no coverage tools)." >&2
exit 1
