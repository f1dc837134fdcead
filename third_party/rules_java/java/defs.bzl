"""The Java rules that Bazel 4.2.3's @bazel_tools loads from @rules_java.

Bazel 4.2.3 (Debian's bazel-bootstrap) downloads rules_java on first use,
which an offline machine cannot; this project has no Java target, so these
forward to Bazel's native rules, as rules_java of that time did.
"""

def java_binary(**attrs):
    native.java_binary(**attrs)

def java_import(**attrs):
    native.java_import(**attrs)

def java_library(**attrs):
    native.java_library(**attrs)

def java_lite_proto_library(**attrs):
    native.java_lite_proto_library(**attrs)

def java_proto_library(**attrs):
    native.java_proto_library(**attrs)

def java_test(**attrs):
    native.java_test(**attrs)

def java_package_configuration(**attrs):
    native.java_package_configuration(**attrs)

def java_plugin(**attrs):
    native.java_plugin(**attrs)

def java_runtime(**attrs):
    native.java_runtime(**attrs)

def java_toolchain(**attrs):
    native.java_toolchain(**attrs)
