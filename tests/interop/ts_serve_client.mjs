// A client written with the TypeScript MCP SDK (`@modelcontextprotocol/client` 2.4),
// driving `demiurge serve` for tests/interop.rs: over stdio (`CMD ARGS...`) or
// streamable HTTP (`http URL`), in the 2025-11-25 era or, with `TS_ERA=2026-07-28`,
// pinned to the modern one (where the SDK answers `input_required` rounds with the
// same handler). Lists the tools (calling `connect_servers` first when offered),
// calls `d__echo`, answers each elicitation with the
// next answer given after `--`, and prints one JSON line.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const split = process.argv.indexOf('--');
const where = process.argv.slice(2, split);
const answers = process.argv.slice(split + 1);
const asked = [];
const era = process.env.TS_ERA;
const client = new Client(
  { name: 'demiurge-interop-ts', version: '1.0.0' },
  {
    capabilities: { elicitation: { form: {} } },
    ...(era && { versionNegotiation: { mode: { pin: era } } }),
  },
);
client.setRequestHandler('elicitation/create', async (request) => {
  asked.push(request.params.message.split('\n')[0]);
  const answer = answers.shift() ?? 'no';
  return answer === 'decline' ? { action: 'decline' } : { action: 'accept', content: { answer } };
});
const transport = where[0] === 'http'
  ? new StreamableHTTPClientTransport(new URL(where[1]))
  : new StdioClientTransport({ command: where[0], args: where.slice(1) });
await client.connect(transport);
let tools = await client.listTools();
// A modern listing that could not ask about a server's connect offers
// `connect_servers`: a model would call it, then list again.
const connect = tools.tools.some((t) => t.name === 'connect_servers');
if (connect) {
  await client.callTool({ name: 'connect_servers', arguments: {} });
  tools = await client.listTools();
}
const called = await client.callTool({ name: 'd__echo', arguments: { message: 'from ts' } });
const text = called.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ');
const protocol = client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? '';
console.log(JSON.stringify({ protocol, connect, tools: tools.tools.map((t) => t.name), is_error: !!called.isError, text, asked }));
await client.close();
