// .npy files for the ONNX Runtime scripts (tests/onnx/ort_run.js, bench/ort_time.cjs,
// bench/batch_ort.cjs): one reader and one writer instead of a copy in each.
//   const npy = require('.../tests/onnx/npy.cjs');
//   npy.read(file, ort) -> ort.Tensor;  npy.bytes(tensor) -> Buffer;  npy.write(file, tensor) (atomic)
// Element types: float32, int32, int64, bool, uint8, int8; little-endian, C order.
'use strict';
const fs = require('fs');

const BY_DESCR = { '<f4': ['float32', Float32Array], '<i4': ['int32', Int32Array], '<i8': ['int64', BigInt64Array],
                   '|b1': ['bool', Uint8Array], '|u1': ['uint8', Uint8Array], '|i1': ['int8', Int8Array] };
const DESCR = { float32: '<f4', int32: '<i4', int64: '<i8', bool: '|b1', uint8: '|u1', int8: '|i1' };

function read(file, ort) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(file + ': not a .npy file');
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const off = major === 1 ? 10 : 12;
  const header = b.toString('latin1', off, off + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(file + ': Fortran order is not supported');
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  if (!BY_DESCR[descr]) throw new Error(file + ': unsupported dtype ' + descr);
  const [type, Arr] = BY_DESCR[descr];
  const data = b.subarray(off + hlen);
  const copy = new Uint8Array(data.length);  // aligned for the typed array
  copy.set(data);
  const arr = new Arr(copy.buffer, 0, data.length / Arr.BYTES_PER_ELEMENT);
  return new ort.Tensor(type, type === 'bool' ? Array.from(arr, (v) => v !== 0) : arr, shape);
}

function bytes(t) {
  const descr = DESCR[t.type];
  if (!descr) throw new Error('output type ' + t.type + ' is not supported here');
  const shape = t.dims.length === 1 ? `(${t.dims[0]},)` : `(${t.dims.join(', ')})`;
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  while ((10 + h.length + 1) % 64) h += ' ';
  h += '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(h.length, 8);
  const body = t.type === 'bool' ? Buffer.from(Uint8Array.from(t.data, (v) => (v ? 1 : 0)))
                                 : Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  return Buffer.concat([head, Buffer.from(h, 'latin1'), body]);
}

function write(file, t) {
  const tmp = file + '.tmp';
  fs.writeFileSync(tmp, bytes(t));
  fs.renameSync(tmp, file);
}

module.exports = { read, bytes, write };
