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

const npy = require('./npy.cjs');

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
    feeds[s.slice(0, eq)] = npy.read(s.slice(eq + 1), ort);
  }
  const sess = await ort.InferenceSession.create(model, { intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential' });
  const out = await sess.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  for (const name of sess.outputNames) npy.write(path.join(outDir, name.replace(/[^A-Za-z0-9_.-]/g, '_') + '.npy'), out[name]);
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
