// ONNX Runtime's own greedy loop over a decoder export in Hugging Face's layout (the independent
// reference for `rlx generate`, and its baseline in bench/generate_bench.py).
//
//   NODE_PATH=DIR/node_modules node tests/onnx/ort_greedy.js MODEL PROMPT STEPS KV_HEADS HEAD_DIM [--threads N] [--spin 0|1]
//
// PROMPT: ids like 5,17,42. Inputs: input_ids [1, t] int64, and where the model has them
// attention_mask [1, past + t] int64 (all ones), position_ids [1, t] int64, past_key_values.N.key /
// .value [1, KV_HEADS, past, HEAD_DIM] float32 (empty on the prompt step, then the step's
// present.N.*), and use_cache_branch [1] bool (false on the prompt step, true after: Optimum's
// merged decoder). Each step takes the last position's largest logit (the first on ties).
// Prints one JSON line: {version, ids, load_ms, first_token_ms, step_ms: [...]}; first_token_ms
// counts the session's creation, as rlx generate's first token counts loading the model.
'use strict';
const path = require('path');
const ort = require('onnxruntime-node');

const args = process.argv.slice(2);
const opt = (name, def) => {
  const k = args.indexOf(name);
  if (k < 0) return def;
  const v = args[k + 1];
  args.splice(k, 2);
  return v;
};
const threads = Number(opt('--threads', '2'));
const spin = opt('--spin', '1');
const [model, promptStr, stepsStr, kvHeadsStr, headDimStr] = args;
if (!headDimStr) {
  console.error('usage: ort_greedy.js MODEL PROMPT STEPS KV_HEADS HEAD_DIM [--threads N] [--spin 0|1]');
  process.exit(2);
}
const prompt = promptStr.split(',').map((s) => BigInt(s.trim()));
const steps = Number(stepsStr), kvHeads = Number(kvHeadsStr), headDim = Number(headDimStr);

const i64 = (vals, dims) => new ort.Tensor('int64', BigInt64Array.from(vals), dims);

(async () => {
  const t0 = process.hrtime.bigint();
  const ms = (a, b) => Number(b - a) / 1e6;
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    extra: { session: { intra_op: { allow_spinning: spin === '0' ? '0' : '1' } } },
  });
  const tLoaded = process.hrtime.bigint();
  const pastNames = session.inputNames.filter((n) => n.startsWith('past_key_values.'));
  let past = {};
  for (const n of pastNames) past[n] = new ort.Tensor('float32', new Float32Array(0), [1, kvHeads, 0, headDim]);
  let cur = prompt, pastLen = 0;
  const ids = [], stepMs = [];
  let prev = t0, firstMs = 0;
  for (let step = 0; step < steps; ++step) {
    const t = cur.length;
    const feeds = { ...past, input_ids: i64(cur, [1, t]) };
    if (session.inputNames.includes('attention_mask')) feeds.attention_mask = i64(Array(pastLen + t).fill(1n), [1, pastLen + t]);
    if (session.inputNames.includes('position_ids')) feeds.position_ids = i64(Array.from({ length: t }, (_, i) => BigInt(pastLen + i)), [1, t]);
    if (session.inputNames.includes('use_cache_branch')) feeds.use_cache_branch = new ort.Tensor('bool', [pastLen > 0], [1]);
    const out = await session.run(feeds);
    const logits = out.logits;
    const V = logits.dims[2];
    const row = logits.data.subarray((t - 1) * V, t * V);
    let best = 0;
    for (let i = 1; i < V; ++i) if (row[i] > row[best]) best = i;
    past = {};
    for (const n of pastNames) past[n] = out[n.replace('past_key_values.', 'present.')];
    pastLen += t;
    ids.push(best);
    cur = [BigInt(best)];
    const now = process.hrtime.bigint();
    if (step === 0) firstMs = ms(t0, now);
    else stepMs.push(ms(prev, now));
    prev = now;
  }
  let version = '?';
  try {
    version = require(path.join(path.dirname(require.resolve('onnxruntime-node')), '..', 'package.json')).version;
  } catch (e) {}
  console.log(JSON.stringify({ version, ids, load_ms: ms(t0, tLoaded), first_token_ms: firstMs, step_ms: stepMs }));
})().catch((e) => {
  console.error(`ort_greedy: ${e.message || e}`);
  process.exit(3);
});
