// The loop a user would write with onnxruntime-node over a batch list, for bench/batch_jobs.py:
// for each item of a JSON Lines list, read its .npy, run, write every output as DIR/<id>/<name>.npy
// (a temporary, then a rename, as rlx does) and append a result line.
//   node batch_ort.cjs MODULE_DIR MODEL.onnx LIST OUT_DIR THREADS
// Prints one JSON line {version, items, seconds}.
'use strict';
const fs = require('fs');
const path = require('path');
const [moduleDir, model, list, outDir, threads] = process.argv.slice(2);
const ort = require(path.join(path.resolve(moduleDir), 'node_modules', 'onnxruntime-node'));

const npy = require(path.join(__dirname, '..', 'tests', 'onnx', 'npy.cjs'));

(async () => {
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  fs.mkdirSync(outDir, { recursive: true });
  const results = fs.openSync(path.join(outDir, 'results.jsonl'), 'a');
  let n = 0;
  for (const line of fs.readFileSync(list, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const item = JSON.parse(line);
    const s = process.hrtime.bigint();
    const feeds = {};
    for (const [k, v] of Object.entries(item.inputs)) feeds[k] = npy.read(v.replace(/^@/, ''), ort);
    const out = await session.run(feeds);
    const dir = path.join(outDir, item.id);
    fs.mkdirSync(dir, { recursive: true });
    for (const [k, t] of Object.entries(out)) {
      const tmp = path.join(dir, `.${k}.npy.tmp`);
      fs.writeFileSync(tmp, npy.bytes(t));
      fs.renameSync(tmp, path.join(dir, `${k}.npy`));
    }
    fs.writeSync(results, JSON.stringify({ id: item.id, status: 'ok', ms: Number(process.hrtime.bigint() - s) / 1e6 }) + '\n');
    n++;
  }
  const version = require(path.join(path.resolve(moduleDir), 'node_modules', 'onnxruntime-node', 'package.json')).version;
  console.log(JSON.stringify({ version, items: n,
                               seconds: Number(process.hrtime.bigint() - t0) / 1e9 }));
})().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
