// A consumer-group member written from docs/protocol.md alone (Member heartbeat, D1, M5 and
// "Notes for a member in another language"), in plain Node.js 20: the global WebSocket of
// `node --experimental-websocket` and a small RESP2 client over node:net. No npm packages.
//
//   node --experimental-websocket member.mjs <coordinator url> <redis host:port> <prefix> <group> [memberId]
//
// Prints one JSON line per handled message on stdout: {"key", "value", "shard", "id"};
// diagnostics go to stderr. SIGTERM: stop reading, finish the batch in hand, leave with -1.
import net from "node:net";
import { randomBytes } from "node:crypto";

const [url, redisAddress, prefix, group, givenId] = process.argv.slice(2);
if (!url || !redisAddress || !prefix || !group) {
  process.stderr.write("usage: member.mjs <coordinator url> <redis host:port> <prefix> <group> [memberId]\n");
  process.exit(2);
}
const memberId = givenId || `node-${process.pid}-${randomBytes(4).toString("hex")}`;
const log = (...parts) => process.stderr.write(`[${memberId}] ${parts.join(" ")}\n`);

// The ack script, as docs/protocol.md M5 inlines it.
const ACK_LUA = `-- KEYS[1] a shard stream, KEYS[2] its owner token for the group; ARGV[1] the memberId;
-- ARGV[2] the group; ARGV[3] '1' to ack with XACKDEL, '0' with XACK; ARGV[4..] entry ids.
-- Returns how many entries were acked, or -1 (NOT_OWNER) when the token names another
-- member: then nothing is acked (D1).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return -1
end
if ARGV[3] == '1' then
  local result = redis.call('XACKDEL', KEYS[1], ARGV[2], 'ACKED', 'IDS', #ARGV - 3,
                            unpack(ARGV, 4))
  local acked = 0
  for _, code in ipairs(result) do
    if code ~= -1 then acked = acked + 1 end
  end
  return acked
end
return redis.call('XACK', KEYS[1], ARGV[2], unpack(ARGV, 4))
`;

// --- RESP2 over node:net --------------------------------------------------------------
class RedisError extends Error {}

function parseReply(buf, pos) {
  // returns [value, nextPos] or null when the buffer does not hold the whole reply yet
  const end = buf.indexOf("\r\n", pos);
  if (end < 0) return null;
  const type = String.fromCharCode(buf[pos]);
  const line = buf.toString("utf8", pos + 1, end);
  const next = end + 2;
  if (type === "+") return [line, next];
  if (type === "-") return [new RedisError(line), next];
  if (type === ":") return [Number(line), next];
  if (type === "$") {
    const n = Number(line);
    if (n < 0) return [null, next];
    if (buf.length < next + n + 2) return null;
    return [buf.subarray(next, next + n), next + n + 2];
  }
  if (type === "*") {
    const n = Number(line);
    if (n < 0) return [null, next];
    const items = [];
    let at = next;
    for (let i = 0; i < n; i++) {
      const parsed = parseReply(buf, at);
      if (parsed === null) return null;
      items.push(parsed[0]);
      at = parsed[1];
    }
    return [items, at];
  }
  throw new Error(`unexpected RESP type ${JSON.stringify(type)}`);
}

class Redis {
  constructor(address) {
    const colon = address.lastIndexOf(":");
    this.socket = net.createConnection({ host: address.slice(0, colon), port: Number(address.slice(colon + 1)) });
    this.buffer = Buffer.alloc(0);
    this.waiting = [];
    this.socket.on("data", (chunk) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      for (;;) {
        const parsed = parseReply(this.buffer, 0);
        if (parsed === null) break;
        this.buffer = this.buffer.subarray(parsed[1]);
        const { resolve, reject } = this.waiting.shift();
        parsed[0] instanceof RedisError ? reject(parsed[0]) : resolve(parsed[0]);
      }
    });
    this.socket.on("error", (error) => { log("redis:", error.message); process.exit(3); });
  }
  call(...args) {
    const parts = [`*${args.length}\r\n`];
    for (const arg of args) {
      const bytes = Buffer.isBuffer(arg) ? arg : Buffer.from(String(arg));
      parts.push(`$${bytes.length}\r\n`, bytes, "\r\n");
    }
    this.socket.write(Buffer.concat(parts.map((p) => (Buffer.isBuffer(p) ? p : Buffer.from(p)))));
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }
  close() { this.socket.end(); }
}

// --- member state -----------------------------------------------------------------------
const now = () => performance.now(); // monotonic (D1)
const held = new Map(); // shard -> {generation, needsClaim}: shards we read
const draining = new Set(); // revoked, still held until the read loop lets go of them
const revoked = new Set(); // drained: reported REVOKED until an OK
let generation = 0;
let epoch = 0;
let leaseTtlMs = 0;
let intervalMs = 1000;
let acceptedSentAt = -Infinity; // send time of the last OK / REVOKE_PENDING (notes 2)
let retentionMode = "acked";
let serverHasXackdel = false;
let storeChecked = false;
let stopping = false;
let due = false; // a push or a finished drain asked for a heartbeat (H10)
let endWait = () => {};
const wake = () => { due = true; endWait(); }; // also while a heartbeat is in flight

const redis = new Redis(redisAddress);
const leaseAlive = () => now() - acceptedSentAt < leaseTtlMs;
const stillHeld = (shard, gen) => held.get(shard)?.generation === gen && leaseAlive(); // D1

function revoke(shard) {
  if (held.delete(shard)) draining.add(shard);
}
function forgetAll() {
  held.clear();
  draining.clear();
  revoked.clear();
  epoch = 0;
}

// --- the coordinator session -------------------------------------------------------------
const socket = new WebSocket(`${url}/v1/member`);
const pending = new Map();
let nextRequestId = 1;
await new Promise((resolve, reject) => {
  socket.addEventListener("open", resolve, { once: true });
  socket.addEventListener("error", () => reject(new Error(`cannot connect to ${url}`)), { once: true });
});
socket.addEventListener("message", (event) => {
  const message = JSON.parse(event.data);
  if (message.requestId !== null && message.requestId !== undefined && pending.has(message.requestId)) {
    pending.get(message.requestId)(message);
    pending.delete(message.requestId);
  } else if (message.type === "assignmentChanged") {
    wake(); // a hint: heartbeat at once (H10)
  } else {
    log("unexpected message:", event.data);
  }
});
socket.addEventListener("close", (event) => {
  if (!stopping) { log("coordinator session closed:", event.code); process.exit(4); }
});

function request(body) {
  const requestId = nextRequestId++;
  socket.send(JSON.stringify({ ...body, requestId }));
  return new Promise((resolve) => pending.set(requestId, resolve));
}

async function applyRouting(routing) {
  if (!routing) return;
  if (!storeChecked) {
    const ours = await redis.call("GET", "rsc:store-id");
    if (ours === null || ours.toString() !== routing.storeId) {
      log(`redis ${redisAddress} holds store id ${ours} but the coordinator ${url} says ${routing.storeId}`);
      process.exit(5);
    }
    storeChecked = true;
  }
  if (routing.retention) retentionMode = routing.retention.mode; // notes 6
}

async function heartbeat(leaving = false) {
  const sentAt = now();
  const body = {
    type: "heartbeat", streamPrefix: prefix, consumerGroup: group, memberId,
    memberEpoch: leaving ? -1 : epoch, capacity: 1,
    // revoked shards stay listed until the heartbeat that reports them REVOKED (notes 5)
    ownedShards: epoch === 0 || leaving ? [] : [...held.keys(), ...draining],
    revokingShards: leaving ? [] : [...revoked].map((shard) => ({ shard, state: "REVOKED" })),
  };
  const reported = [...revoked];
  const answer = await request(body);
  if (leaving) return answer;
  const status = answer.status;
  if (answer.heartbeatIntervalMs) intervalMs = answer.heartbeatIntervalMs;
  if (status === "OK" || status === "REVOKE_PENDING") {
    acceptedSentAt = sentAt;
    leaseTtlMs = answer.leaseTtlMs;
    epoch = answer.memberEpoch;
    await applyRouting(answer.routing);
    const listed = new Set(answer.assignment?.assignedShards ?? []);
    for (const shard of [...held.keys()]) if (!listed.has(shard)) revoke(shard);
    if (status === "OK") {
      for (const shard of reported) revoked.delete(shard);
      for (const shard of listed) {
        if (!held.has(shard) && !draining.has(shard)) held.set(shard, { generation: ++generation, needsClaim: true });
      }
    }
    return answer;
  }
  if (status === "SYNC_METADATA") { // drain-only, then a full heartbeat at once (notes 4)
    if (answer.assignment) {
      const listed = new Set(answer.assignment.assignedShards);
      for (const shard of [...held.keys()]) if (!listed.has(shard)) revoke(shard);
    }
    return heartbeat();
  }
  if (status === "UNKNOWN_MEMBER_ID" || status === "FENCED_MEMBER_EPOCH") {
    log("rejoining after", status);
    forgetAll();
    return heartbeat();
  }
  log("heartbeat answered", status, answer.error ?? "");
  return answer;
}

async function heartbeatLoop() {
  while (!stopping) {
    due = false;
    await heartbeat();
    if (due) continue; // it came while that heartbeat was in flight: its answer may predate it
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, intervalMs);
      endWait = () => { clearTimeout(timer); resolve(); };
    });
    endWait = () => {};
  }
}

// --- the data plane (M5 Consuming) -------------------------------------------------------
function fieldsOf(list) {
  const fields = new Map();
  for (let i = 0; list && i + 1 < list.length; i += 2) fields.set(list[i].toString(), list[i + 1]);
  return fields;
}

async function handleAndAck(shard, gen, entries) {
  const done = [];
  for (const entry of entries) {
    if (!entry || !entry[1]) continue; // nil entries: nothing to handle (notes 7)
    if (!stillHeld(shard, gen)) return; // D1 before each handler call
    const fields = fieldsOf(entry[1]);
    const key = fields.has("key") ? fields.get("key").toString() : null;
    const id = entry[0].toString();
    process.stdout.write(JSON.stringify({ key, value: fields.get("value").toString(), shard, id }) + "\n");
    done.push(id);
  }
  for (let i = 0; i < done.length; i += 2000) {
    if (!stillHeld(shard, gen)) return; // D1 before each ack
    const xackdel = retentionMode === "acked" && serverHasXackdel ? "1" : "0";
    const acked = await redis.call("EVAL", ACK_LUA, 2, shard, `${shard}:owner:${group}`, memberId, group,
      xackdel, ...done.slice(i, i + 2000));
    if (acked === -1) { log("not the owner of", shard, "any more"); revoke(shard); return; }
  }
}

async function readLoop() {
  while (!stopping) {
    for (const shard of draining) { draining.delete(shard); revoked.add(shard); wake(); }
    for (const [shard, hold] of held) {
      if (!hold.needsClaim) continue;
      let cursor = "0-0";
      do { // step 1: what a previous owner was given and did not ack
        const [next, entries] = await redis.call("XAUTOCLAIM", shard, group, memberId, 0, cursor, "COUNT", 100);
        await handleAndAck(shard, hold.generation, entries);
        cursor = next.toString();
      } while (cursor !== "0-0" && stillHeld(shard, hold.generation));
      hold.needsClaim = false;
    }
    const shards = [...held.entries()].filter(([, hold]) => !hold.needsClaim);
    if (shards.length === 0 || !leaseAlive()) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      continue;
    }
    const generations = new Map(shards.map(([shard, hold]) => [shard, hold.generation]));
    const reply = await redis.call("XREADGROUP", "GROUP", group, memberId, "COUNT", 100, "BLOCK", 200,
      "STREAMS", ...generations.keys(), ...[...generations.keys()].map(() => ">"));
    for (const [stream, entries] of reply ?? []) {
      const shard = stream.toString();
      await handleAndAck(shard, generations.get(shard), entries);
    }
  }
}

const info = await redis.call("COMMAND", "INFO", "XACKDEL");
serverHasXackdel = Array.isArray(info) && info[0] !== null;
log("joining", prefix, group, "xackdel", serverHasXackdel);

const reading = readLoop();
const beating = heartbeatLoop();
process.on("SIGTERM", async () => {
  if (stopping) return;
  stopping = true; // stop reading; the batch in hand finishes (notes 3)
  wake();
  await reading;
  await beating;
  const answer = await heartbeat(true);
  log("left:", answer.status, "memberEpoch", answer.memberEpoch);
  socket.close(1000);
  redis.close();
  process.exit(answer.status === "OK" ? 0 : 1);
});
