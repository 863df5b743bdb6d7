// The loop a user would write with onnxruntime-node over a batch list, for bench/batch_jobs.py:
// for each item of a JSON Lines list, read its .npy, run, write every output as DIR/<id>/<name>.npy
// (a temporary, then a rename, as rlx does) and append a result line.
//   node batch_ort.cjs MODULE_DIR MODEL.onnx LIST OUT_DIR THREADS
// Prints one JSON line {version, items, seconds}.
'use strict';
const fs = require('fs');
const path = require('path');
const [moduleDir, model, list, outDir, threads] = process.argv.slice(2);
const ort = require(path.join(moduleDir, 'node_modules', 'onnxruntime-node'));

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const data = buf.subarray(start + hlen);
  if (descr !== '<f4') throw new Error(`${file}: dtype ${descr} is not supported here`);
  return new ort.Tensor('float32', new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)), shape);
}

function npyBytes(t) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${t.dims.join(', ')}${t.dims.length === 1 ? ',' : ''}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const d = t.data;
  return Buffer.concat([head, Buffer.from(header, 'latin1'), Buffer.from(d.buffer, d.byteOffset, d.byteLength)]);
}

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
    for (const [k, v] of Object.entries(item.inputs)) feeds[k] = readNpy(v.replace(/^@/, ''));
    const out = await session.run(feeds);
    const dir = path.join(outDir, item.id);
    fs.mkdirSync(dir, { recursive: true });
    for (const [k, t] of Object.entries(out)) {
      const tmp = path.join(dir, `.${k}.npy.tmp`);
      fs.writeFileSync(tmp, npyBytes(t));
      fs.renameSync(tmp, path.join(dir, `${k}.npy`));
    }
    fs.writeSync(results, JSON.stringify({ id: item.id, status: 'ok', ms: Number(process.hrtime.bigint() - s) / 1e6 }) + '\n');
    n++;
  }
  const version = require(path.join(moduleDir, 'node_modules', 'onnxruntime-node', 'package.json')).version;
  console.log(JSON.stringify({ version, items: n,
                               seconds: Number(process.hrtime.bigint() - t0) / 1e9 }));
})().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
