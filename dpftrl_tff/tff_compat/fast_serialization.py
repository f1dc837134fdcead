"""Copy-free serialization of nested TFF values (a speed patch for TFF 0.87).

Every `process.next(state, data)` sends the whole server state (model
weights, server-optimizer momentum and, with DP-FTRL, the tree aggregator's
level buffer of log2(t) noise vectors) from Python to TFF's C++ worker.
TFF 0.87 serializes a struct bottom-up, wrapping each serialized child in a
new `Struct.Element(value=child)` and each federated member through
`federated.value.append(child)`; with the upb protobuf runtime both *copy*
the child. A tensor nested k structs deep is therefore copied about k times:
for the paper-size model this cost ~0.3 s per round for FedAvg and grew with
the DP-FTRL tree depth (about +1 s per round after a few rounds, more as
training goes on), which dominated the DP-FTRL round-time overhead.

`install()` replaces `RemoteExecutor.create_value` (the only caller of
`value_serialization.serialize_value`) with one that encodes struct and
federated values to protobuf wire format by hand: a list of byte chunks whose
tensor contents are views of the numpy buffers, joined once, sent over TFF's
own gRPC channel. Each tensor is copied about twice instead of ~k+2 times
plus a slow upb re-encoding (about 0.1 s per 40 MB). Leaves other than
numeric arrays (scalars, datasets, computations) go through TFF's serializer.
The bytes parse to exactly the message TFF's serializer builds (tested on
nested, named, federated, empty and dataset-bearing values). `uninstall()`
restores TFF's method. Set DPFTRL_TFF_FAST_SERIALIZATION=0 to keep it.
"""

import os
from typing import List

import numpy as np
from tensorflow_federated.proto.v0 import array_pb2
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.compiler import array
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import value_serialization
from tensorflow_federated.python.core.impl.types import array_shape
from tensorflow_federated.python.core.impl.types import computation_types
from tensorflow_federated.python.core.impl.types import dtype_utils
from tensorflow_federated.python.core.impl.types import type_serialization

_ORIGINAL = value_serialization.serialize_value
_ORIGINAL_CREATE_VALUE = remote_executor.RemoteExecutor.create_value
ENV_SWITCH = 'DPFTRL_TFF_FAST_SERIALIZATION'


def _struct_items(value: object, type_spec: computation_types.StructType):
  """(name, type, value) of every struct element, checking the arity."""
  value_structure = structure.from_container(value)
  if len(value_structure) != len(type_spec):
    raise TypeError(
        f'Cannot serialize a struct value of {len(value_structure)} '
        f'elements to a struct type requiring {len(type_spec)} elements. '
        f'Trying to serialize\n{value!r}\nto\n{type_spec}.')
  return [(name, e_type, e_val) for (name, e_type), (_, e_val) in zip(
      structure.iter_elements(type_spec),
      structure.iter_elements(value_structure))]


def _federated_members(value: object,
                       type_spec: computation_types.FederatedType) -> list:
  members = [value] if type_spec.all_equal else value
  if not isinstance(members, list):
    raise TypeError(f'Expected a list of federated members for '
                    f'{type_spec}, got {type(members)}.')
  return members


# Field numbers of executor.proto / array.proto.
_VALUE_STRUCT, _VALUE_FEDERATED, _VALUE_ARRAY = 3, 5, 6
_STRUCT_ELEMENT = 1
_ELEMENT_NAME, _ELEMENT_VALUE = 1, 2
_FEDERATED_TYPE, _FEDERATED_VALUE = 1, 2
_ARRAY_CONTENT = 18
_REQUEST_VALUE, _REQUEST_EXECUTOR = 1, 2
_LEN = 2  # Wire type of length-delimited fields.


def _varint(n: int) -> bytes:
  out = bytearray()
  while True:
    byte = n & 0x7F
    n >>= 7
    if n:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _field(number: int, chunks: List, size: int, out: List) -> int:
  """Appends length-delimited field `number` holding `chunks`; returns size."""
  head = _varint(number << 3 | _LEN) + _varint(size)
  out.append(head)
  out.extend(chunks)
  return len(head) + size


def _encode_value(value: object, type_spec: computation_types.Type,
                  out: List) -> tuple[int, computation_types.Type]:
  """Appends the wire bytes of Value(value); returns (size, type)."""
  if isinstance(type_spec, computation_types.StructType):
    struct_chunks, struct_size = [], 0
    for e_name, e_type, e_val in _struct_items(value, type_spec):
      element, element_size = [], 0
      if e_name:
        name = e_name.encode()
        element_size += _field(_ELEMENT_NAME, [name], len(name), element)
      value_chunks = []
      size, _ = _encode_value(e_val, e_type, value_chunks)
      element_size += _field(_ELEMENT_VALUE, value_chunks, size, element)
      struct_size += _field(_STRUCT_ELEMENT, element, element_size,
                            struct_chunks)
    return _field(_VALUE_STRUCT, struct_chunks, struct_size, out), type_spec
  if isinstance(type_spec, computation_types.FederatedType):
    members = _federated_members(value, type_spec)
    fed_chunks, fed_size = [], 0
    type_bytes = type_serialization.serialize_type(
        type_spec).federated.SerializeToString()
    fed_size += _field(_FEDERATED_TYPE, [type_bytes], len(type_bytes),
                       fed_chunks)
    for member in members:
      member_chunks = []
      size, member_type = _encode_value(member, type_spec.member,
                                        member_chunks)
      type_spec.member.check_assignable_from(member_type)
      fed_size += _field(_FEDERATED_VALUE, member_chunks, size, fed_chunks)
    return _field(_VALUE_FEDERATED, fed_chunks, fed_size, out), type_spec
  if (isinstance(type_spec, computation_types.TensorType) and
      isinstance(value, np.ndarray) and value.ndim > 0 and
      value.dtype.type is type_spec.dtype.type and
      value.dtype.type is not np.str_ and value.dtype.kind in 'biuf' and
      array.is_compatible_shape(value, type_spec.shape)):
    # Same content as array.to_proto_content, without copying the buffer.
    header = array_pb2.Array(
        dtype=dtype_utils.to_proto(value.dtype.type),
        shape=array_shape.to_proto(value.shape)).SerializeToString()
    content = memoryview(np.ascontiguousarray(value)).cast('B')
    arr_chunks = [header]
    arr_size = len(header) + _field(_ARRAY_CONTENT, [content], len(content),
                                    arr_chunks)
    return _field(_VALUE_ARRAY, arr_chunks, arr_size, out), type_spec
  proto, result_type = _ORIGINAL(value, type_spec)
  data = proto.SerializeToString()
  out.append(data)
  return len(data), result_type


def encode_value(value: object, type_spec: computation_types.Type
                 ) -> tuple[bytes, computation_types.Type]:
  """Wire bytes of the `executor_pb2.Value` TFF would build, and its type."""
  chunks = []
  _, result_type = _encode_value(value, type_spec, chunks)
  return b''.join(chunks), result_type


async def _create_value(self, value, type_spec=None):
  """`RemoteExecutor.create_value` sending hand-encoded request bytes."""
  self._check_has_executor_id()  # pylint: disable=protected-access
  if self._stream_structs and isinstance(  # pylint: disable=protected-access
      type_spec, computation_types.StructType):
    return await self.create_value_stream_structs(value, type_spec)
  stub = self._stub  # pylint: disable=protected-access
  channel = getattr(stub, '_channel', None)
  if not isinstance(type_spec, (computation_types.StructType,
                                computation_types.FederatedType)) or (
                                    channel is None):
    return await _ORIGINAL_CREATE_VALUE(self, value, type_spec)
  chunks = []
  size, type_spec = _encode_value(value, type_spec, chunks)
  request = []
  _field(_REQUEST_VALUE, chunks, size, request)
  executor = self._executor_id.SerializeToString()  # pylint: disable=protected-access
  _field(_REQUEST_EXECUTOR, [executor], len(executor), request)
  rpc = getattr(stub, '_dpftrl_raw_create_value', None)
  if rpc is None:
    rpc = channel.unary_unary(
        '/tensorflow_federated.v0.ExecutorGroup/CreateValue',
        request_serializer=None,
        response_deserializer=executor_pb2.CreateValueResponse.FromString)
    stub._dpftrl_raw_create_value = rpc  # pylint: disable=protected-access
  response = remote_executor_grpc_stub._request(rpc, b''.join(request))  # pylint: disable=protected-access
  if not isinstance(response, executor_pb2.CreateValueResponse):
    raise TypeError(f'Unexpected response {type(response)}.')
  return remote_executor.RemoteValue(response.value_ref, type_spec, self)


def install() -> bool:
  """Patches TFF's serializer; returns True if the fast path is active."""
  if os.environ.get(ENV_SWITCH, '1') == '0':
    uninstall()
    return False
  remote_executor.RemoteExecutor.create_value = _create_value
  return True


def uninstall():
  remote_executor.RemoteExecutor.create_value = _ORIGINAL_CREATE_VALUE


def installed() -> bool:
  return remote_executor.RemoteExecutor.create_value is _create_value
