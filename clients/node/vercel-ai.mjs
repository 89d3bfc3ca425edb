// The Vercel AI SDK's own loop: generateText with tools and a step limit, on the Anthropic provider.
import { createAnthropic } from '@ai-sdk/anthropic';
import { generateText, jsonSchema, stepCountIs, tool } from 'ai';
import { callTool, describeError, printResult, readSpec } from './common.mjs';

const spec = readSpec();
// the provider appends /messages to its base URL, which therefore ends in /v1
const anthropic = createAnthropic({ baseURL: `${spec.base_url}/v1`, apiKey: spec.api_key });

const tools = {};
for (const t of spec.tools) {
  tools[t.name] = tool({
    description: t.description,
    inputSchema: jsonSchema(t.input_schema),
    execute: (input) => callTool(spec, t.name, input),
  });
}
for (const s of spec.server_tools) {
  if (s.type === 'web_search_20250305') tools[s.name] = anthropic.tools.webSearch_20250305({ maxUses: s.max_uses });
}

const options = {
  model: anthropic(spec.model),
  prompt: spec.prompt,
  maxOutputTokens: spec.max_tokens,
  maxRetries: spec.max_retries,
  stopWhen: stepCountIs(spec.max_steps),
  abortSignal: AbortSignal.timeout(spec.timeout_ms),
};
if (Object.keys(tools).length) options.tools = tools;
if (spec.system) options.system = spec.system;
if (spec.stop_sequences) options.stopSequences = spec.stop_sequences;
if (spec.thinking) {
  options.providerOptions = { anthropic: { thinking: { type: 'enabled', budgetTokens: spec.thinking } } };
}

try {
  const result = await generateText(options);
  printResult({
    is_error: false,
    finish_reason: result.finishReason,
    stop_reason: result.response?.body?.stop_reason ?? result.providerMetadata?.anthropic?.stopReason ?? null,
    steps: result.steps.length,
    text: result.text,
  });
} catch (error) {
  printResult({ is_error: true, error: describeError(error) });
  process.exitCode = 1;
}
