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
const ort = require(path.join(path.resolve(moduleDir), 'node_modules', 'onnxruntime-node'));

const npy = require(path.join(__dirname, '..', 'tests', 'onnx', 'npy.cjs'));

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
  for (const name of session.inputNames) feeds[name] = npy.read(path.join(inDir, `${name}.npy`), ort);
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
    version = require(path.join(path.resolve(moduleDir), 'node_modules', 'onnxruntime-node', 'package.json')).version;
  } catch (e) {}
  console.log(JSON.stringify({ version, median_ms: sorted[Math.floor(sorted.length / 2)], min_ms: sorted[0], times_ms: times }));
})().catch((e) => {
  console.error(`ort_time: ${e.message || e}`);
  process.exit(3);
});
