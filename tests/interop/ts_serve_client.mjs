// A client written with the TypeScript MCP SDK (`@modelcontextprotocol/client` 2.4),
// driving `demiurge serve` over stdio for tests/interop.rs: lists the tools, calls
// `d__echo`, answers each elicitation with the next answer given after `--`, and prints
// one JSON line.
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const split = process.argv.indexOf('--');
const [command, ...args] = process.argv.slice(2, split);
const answers = process.argv.slice(split + 1);
const asked = [];
const client = new Client(
  { name: 'demiurge-interop-ts', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler('elicitation/create', async (request) => {
  asked.push(request.params.message.split('\n')[0]);
  const answer = answers.shift() ?? 'no';
  return answer === 'decline' ? { action: 'decline' } : { action: 'accept', content: { answer } };
});
await client.connect(new StdioClientTransport({ command, args }));
const tools = await client.listTools();
const called = await client.callTool({ name: 'd__echo', arguments: { message: 'from ts' } });
const text = called.content.filter((c) => c.type === 'text').map((c) => c.text).join(' ');
console.log(JSON.stringify({ tools: tools.tools.map((t) => t.name), is_error: !!called.isError, text, asked }));
await client.close();
