// Times one ONNX model in ONNX Runtime (onnxruntime-node, CPU provider) for bench/compare_ort.py.
//   node ort_time.cjs MODULE_DIR MODEL.onnx INPUT_DIR THREADS WARMUP REPS OUT_DIR SPIN
// SPIN 1: ORT's default (pool threads spin between runs: best on an idle machine); 0: they
// sleep (session.intra_op.allow_spinning = 0: far better when other processes share the CPUs).
// Inputs: INPUT_DIR/<name>.npy for every model input (f32 or i32/i64, little-endian, C order).
// Prints one JSON line {version, median_ms, min_ms, times_ms}; writes each output to
// OUT_DIR/<name>.f32 (raw little-endian f32) for the value check.
'use strict';
const fs = require('fs');
const path = require('path');
const [moduleDir, model, inDir, threads, warmup, reps, outDir, spin] = process.argv.slice(2);
const ort = require(path.join(moduleDir, 'node_modules', 'onnxruntime-node'));

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order is not supported`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const data = buf.subarray(start + hlen);
  const copy = (T) => new T(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  if (descr === '<f4') return new ort.Tensor('float32', copy(Float32Array), shape);
  if (descr === '<i4') return new ort.Tensor('int32', copy(Int32Array), shape);
  if (descr === '<i8') return new ort.Tensor('int64', copy(BigInt64Array), shape);
  throw new Error(`${file}: dtype ${descr} is not supported`);
}

(async () => {
  const opts = {
    executionProviders: ['cpu'],
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    extra: { session: { intra_op: { allow_spinning: spin === '0' ? '0' : '1' } } },
  };
  const session = await ort.InferenceSession.create(model, opts);
  const feeds = {};
  for (const name of session.inputNames) feeds[name] = readNpy(path.join(inDir, `${name}.npy`));
  let out;
  for (let i = 0; i < 1 + Number(warmup); ++i) out = await session.run(feeds);
  const times = [];
  for (let i = 0; i < Number(reps); ++i) {
    const t0 = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of session.outputNames) {
    const t = out[name];
    fs.writeFileSync(path.join(outDir, `${name}.f32`), Buffer.from(Float32Array.from(t.data).buffer));
  }
  const sorted = [...times].sort((a, b) => a - b);
  let version = '?';
  try {
    version = require(path.join(moduleDir, 'node_modules', 'onnxruntime-node', 'package.json')).version;
  } catch (e) {}
  console.log(JSON.stringify({ version, median_ms: sorted[Math.floor(sorted.length / 2)], min_ms: sorted[0], times_ms: times }));
})().catch((e) => {
  console.error(`ort_time: ${e.message || e}`);
  process.exit(3);
});
