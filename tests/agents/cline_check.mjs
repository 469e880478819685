// Cline's own reading of its MCP settings, and its own client started on a server there:
// `node cline_check.mjs SETTINGS NAME QUERY` prints what Cline resolved for NAME, the
// tools it lists and the answer of memory_search for QUERY, as one JSON line. Cline's CLI
// has no check that runs without a terminal; its library (@cline/core, which the CLI
// runs on) is the same code.
import { createDefaultMcpServerClientFactory, resolveMcpServerRegistrations } from "@cline/core"

const [file, name, query] = process.argv.slice(2)
const registrations = resolveMcpServerRegistrations({ filePath: file })
const registration = registrations.find((r) => r.name === name)
if (!registration) {
  console.log(JSON.stringify({ names: registrations.map((r) => r.name) }))
  process.exit(0)
}
const client = await createDefaultMcpServerClientFactory({ settingsPath: file })(registration)
await client.connect()
try {
  const tools = (await client.listTools()).map((t) => t.name)
  const found = await client.callTool({ name: "memory_search", arguments: { query } })
  console.log(JSON.stringify({ names: registrations.map((r) => r.name), registration, tools, found }))
} finally {
  await client.disconnect()
}
process.exit(0)
