// Runs an ONNX model in ONNX Runtime (onnxruntime-node, CPU) and writes every output as .npy:
// the independent reference for rlx's ONNX import.
//
//   NODE_PATH=DIR/node_modules node tests/onnx/ort_run.js MODEL OUT_DIR NAME=FILE.npy... [--threads N] [--time REPEATS]
//
// Inputs and outputs are float32, int32, int64, bool, uint8 or int8 .npy files (little-endian, C order).
// With --time, prints the median wall time of REPEATS runs after 3 warm-up runs, in ms.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const DT = { '<f4': ['float32', Float32Array], '<i4': ['int32', Int32Array], '<i8': ['int64', BigInt64Array], '|b1': ['bool', Uint8Array],
             '|u1': ['uint8', Uint8Array], '|i1': ['int8', Int8Array] };

function readNpy(file) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(file + ': not a .npy file');
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const off = (major === 1 ? 10 : 12);
  const header = b.toString('latin1', off, off + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(file + ': Fortran order');
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map(s => s.trim()).filter(s => s).map(Number);
  if (!DT[descr]) throw new Error(file + ': unsupported dtype ' + descr);
  const [type, Arr] = DT[descr];
  const data = b.subarray(off + hlen);
  const copy = new Uint8Array(data.length);
  copy.set(data);
  let arr = new Arr(copy.buffer, 0, data.length / Arr.BYTES_PER_ELEMENT);
  if (type === 'bool') arr = Uint8Array.from(arr);
  return new ort.Tensor(type, type === 'bool' ? Array.from(arr, v => v !== 0) : arr, shape);
}

function writeNpy(file, t) {
  const descr = { float32: '<f4', int32: '<i4', int64: '<i8', bool: '|b1', uint8: '|u1', int8: '|i1' }[t.type];
  if (!descr) throw new Error('output type ' + t.type + ' is not supported here');
  const shape = t.dims.length === 1 ? `(${t.dims[0]},)` : `(${t.dims.join(', ')})`;
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  while ((10 + h.length + 1) % 64) h += ' ';
  h += '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(h.length, 8);
  let body;
  if (t.type === 'bool') body = Buffer.from(Uint8Array.from(t.data, v => (v ? 1 : 0)));
  else body = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  const tmp = file + '.tmp';
  fs.writeFileSync(tmp, Buffer.concat([head, Buffer.from(h, 'latin1'), body]));
  fs.renameSync(tmp, file);
}

async function main() {
  const args = process.argv.slice(2);
  let threads = 2, repeats = 0;
  const pos = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--threads') threads = Number(args[++i]);
    else if (args[i] === '--time') repeats = Number(args[++i]);
    else pos.push(args[i]);
  }
  if (pos.length < 2) { console.error('usage: ort_run.js MODEL OUT_DIR NAME=FILE.npy... [--threads N] [--time REPEATS]'); process.exit(2); }
  const [model, outDir, ...specs] = pos;
  const feeds = {};
  for (const s of specs) {
    const eq = s.lastIndexOf('=');
    feeds[s.slice(0, eq)] = readNpy(s.slice(eq + 1));
  }
  const sess = await ort.InferenceSession.create(model, { intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential' });
  const out = await sess.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of sess.outputNames) writeNpy(path.join(outDir, name.replace(/[^A-Za-z0-9_.-]/g, '_') + '.npy'), out[name]);
  if (repeats > 0) {
    for (let i = 0; i < 3; i++) await sess.run(feeds);
    const ts = [];
    for (let i = 0; i < repeats; i++) {
      const t0 = process.hrtime.bigint();
      await sess.run(feeds);
      ts.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    ts.sort((a, b) => a - b);
    console.log(JSON.stringify({ median_ms: ts[Math.floor(ts.length / 2)], runs: repeats, threads }));
  }
}
main().catch(e => { console.error('ort_run: ' + (e && e.message ? e.message : e)); process.exit(3); });
