// A small MCP server on the official TypeScript SDK, for the one behaviour the
// reference servers cannot be made to show on demand: a tool whose input schema
// changes while Deskbell runs. `send_note` (not read-only, so it needs
// confirmation) takes `{ text }`; calling `widen_note` (read-only) adds a
// `priority` field to its schema, and the SDK tells the client that the tool list
// changed. Every `send_note` that runs appends one line to the file named by the
// first argument, so a test can count runs on disk.
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const log = process.argv[2];
const server = new McpServer({ name: "changing-server", version: "1.0.0" });

const note = server.registerTool(
  "send_note",
  {
    title: "Send a note",
    description: "Sends a note to the shop's staff.",
    inputSchema: { text: z.string() },
  },
  async ({ text }) => {
    appendFileSync(log, `${JSON.stringify(text)}\n`);
    return { content: [{ type: "text", text: `Sent: ${text}` }] };
  },
);

server.registerTool(
  "widen_note",
  {
    title: "Widen the note tool",
    description: "Adds a priority to the note tool's input.",
    inputSchema: {},
    annotations: { readOnlyHint: true },
  },
  async () => {
    note.update({ paramsSchema: { text: z.string(), priority: z.string().optional() } });
    return { content: [{ type: "text", text: "The note tool now takes a priority." }] };
  },
);

await server.connect(new StdioServerTransport());
