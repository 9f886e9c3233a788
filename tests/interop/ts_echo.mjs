// An echo server on the TypeScript MCP SDK (npm `@modelcontextprotocol/server`), run by
// tests/interop.rs from the npm prefix it installs: both eras by default, modern-only
// (a legacy `initialize` refused) with `--modern-only`.
import { McpServer } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

const legacy = process.argv.includes('--modern-only') ? 'reject' : 'serve';
serveStdio(
    () => {
        const server = new McpServer({ name: 'ts-echo', version: '1.0.0' }, { capabilities: { tools: {} } });
        server.registerTool(
            'echo',
            { description: 'Returns the message.', inputSchema: z.object({ message: z.string() }) },
            async ({ message }) => ({ content: [{ type: 'text', text: message }] })
        );
        return server;
    },
    { legacy }
);
