// llama.cpp's greedy continuation of token ids on a GGUF file, through node-llama-cpp's
// prebuilt CPU binaries (a test asset; see compare_llamacpp_greedy.sh):
//   node llamacpp_greedy.mjs MODEL.gguf 5,17,9 N  ->  {"tokens":[...]}
import {getLlama} from "node-llama-cpp";
const [modelPath, idsArg, nArg] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 256, sequences: 1});
const sequence = context.getSequence();
const ids = idsArg.split(",").map(Number);
const out = [];
for await (const token of sequence.evaluate(ids, {temperature: 0})) {
  out.push(token);
  if (out.length >= Number(nArg)) break;
}
console.log(JSON.stringify({tokens: out}));
process.exit(0);
