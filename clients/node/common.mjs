// What both agent scripts share: the run's spec (a JSON file written by `agentlab observe`), the demo tools
// (run by agentlab's own implementation behind a local HTTP endpoint, so every client's tools answer alike),
// and the one JSON line each script prints at its end.
import { readFileSync } from 'node:fs';

export function readSpec() {
  return JSON.parse(readFileSync(process.argv[2], 'utf8'));
}

// A tool call, answered by agentlab's demo tools; a failing tool throws, and each framework reports that its way.
export async function callTool(spec, name, input) {
  const reply = await fetch(spec.tools_url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, input }),
  });
  const outcome = await reply.json();
  if (outcome.is_error) throw new Error(outcome.content);
  return outcome.content;
}

export function printResult(result) {
  process.stdout.write(JSON.stringify({ type: 'result', ...result }) + '\n');
}

export function describeError(error) {
  const status = error?.statusCode ?? error?.status ?? error?.lastError?.statusCode;
  return {
    name: error?.name ?? typeof error,
    ...(typeof status === 'number' ? { status } : {}),
    message: String(error?.message ?? error).slice(0, 300),
  };
}
