// An echo server on the TypeScript MCP SDK (npm `@modelcontextprotocol/server`), run by
// tests/interop.rs from the npm prefix it installs: both eras by default, modern-only
// (a legacy `initialize` refused) with `--modern-only`; over stdio, or with
// `--http PORT` over streamable HTTP on 127.0.0.1 (the SDK's fetch-shaped handler
// behind node:http).
import http from 'node:http';
import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

const modernOnly = process.argv.includes('--modern-only');
const factory = () => {
    const server = new McpServer({ name: 'ts-echo', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.registerTool(
        'echo',
        { description: 'Returns the message.', inputSchema: z.object({ message: z.string() }) },
        async ({ message }) => ({ content: [{ type: 'text', text: message }] })
    );
    return server;
};

const at = process.argv.indexOf('--http');
if (at < 0) {
    serveStdio(factory, { legacy: modernOnly ? 'reject' : 'serve' });
} else {
    const handler = createMcpHandler(factory, { legacy: modernOnly ? 'reject' : 'stateless' });
    const port = Number(process.argv[at + 1]);
    http.createServer(async (req, res) => {
        const chunks = [];
        for await (const chunk of req) chunks.push(chunk);
        const bodyless = req.method === 'GET' || req.method === 'HEAD';
        const request = new Request(`http://${req.headers.host}${req.url}`, {
            method: req.method,
            headers: req.headers,
            body: bodyless ? undefined : Buffer.concat(chunks),
        });
        const response = await handler.fetch(request);
        res.writeHead(response.status, Object.fromEntries(response.headers));
        if (response.body) {
            for await (const chunk of response.body) res.write(chunk);
        }
        res.end();
    }).listen(port, '127.0.0.1');
}
