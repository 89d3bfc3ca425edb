// The Anthropic TypeScript SDK's own loop: client.beta.messages.toolRunner with the tools as betaTool()s.
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';
import { callTool, describeError, printResult, readSpec } from './common.mjs';

const spec = readSpec();
const client = new Anthropic({
  baseURL: spec.base_url, apiKey: spec.api_key, maxRetries: spec.max_retries, timeout: spec.timeout_ms,
});

const tools = spec.tools.map((t) => betaTool({
  name: t.name,
  description: t.description,
  inputSchema: t.input_schema,
  run: (input) => callTool(spec, t.name, input),
}));
const params = {
  model: spec.model,
  max_tokens: spec.max_tokens,
  messages: [{ role: 'user', content: spec.prompt }],
  tools: [...tools, ...spec.server_tools],
};
if (spec.max_turns) params.max_iterations = spec.max_turns;
if (spec.system) params.system = spec.system;
if (spec.stop_sequences) params.stop_sequences = spec.stop_sequences;
if (spec.thinking) params.thinking = { type: 'enabled', budget_tokens: spec.thinking };

let iterations = 0;
let last = null;
try {
  for await (const message of client.beta.messages.toolRunner(params)) {
    iterations += 1;
    last = message;
  }
  printResult({
    is_error: false, iterations, stop_reason: last?.stop_reason ?? null,
    text: (last?.content ?? []).map((b) => b.text ?? '').join(''),
  });
} catch (error) {
  printResult({ is_error: true, iterations, error: describeError(error) });
  process.exitCode = 1;
}
