// Package agentwire is the protocol between a process and its host agent
// (issue 26): the messages of the attach socket, their encoding and their
// strict decoding, the attach MAC, and the socket helpers both sides use
// (a SOCK_SEQPACKET unix socket on a filesystem path, SO_PEERCRED).
//
// Every message is one packet, little endian, its type byte first.
// Attaching, in order:
//
//	agent → P  hello(version 2, nonce, agent manager id)
//	P → agent  auth(version, MAC, pid, manager id, actor address)
//	           MAC = HMAC(secret, "rdmamgr-agent", nonce, pid, manager id, address)
//	agent → P  shmPrepare(info)   the agent's shm PrepareRoute info
//	P → agent  shmAccept(info)    P's shm AcceptRoute answer
//	agent → P  welcome(slot, generation, agent address, agent manager id, host id)
//
// Hello's version stays 2 (a process of version 2 refuses any other);
// auth carries the version the process speaks, 3 (Version) or 2
// (MinVersion): an agent of version 2 refuses 3 with gone(VERSION_MISMATCH),
// and the process attaches again speaking 2. Version 3 adds ask and
// answer, which P sends only when it spoke 3:
//
//	P → agent  ask(id, far agent address)
//	agent → P  answer(id, backend: unknown, tcp or ibverbs)
//
// the backend of the agent's route to that far agent (for P's route's
// reason); an answer to no ask waiting is dropped.
//
// Either side may send gone(code, reason) before it closes, during the
// handshake (a refusal) or after it (the agent stops). Then operations:
// P → agent post and cancel, agent → P done, each packet a batch of
// records of one type (a count, then the records): one write per batch.
// A post names its target as (far agent address, far agent manager id,
// via = the target's slot there): a slot means something only at the
// agent incarnation that gave it, so the agent refuses (PEER_GONE) a post
// whose far agent id is not that of the manager its route to the address
// reaches (version 2 added the id).
//
// The agent closes the socket only when none of P's operations can touch
// P's memory any more: every post answered by a done, or its process
// ending (the kernel unmaps a dying process's memory before it closes its
// sockets). So P fails what is still in flight when the socket ends.
//
// Decoding trusts nothing: every field is checked (types, counts, lengths,
// op against the fields it uses, handles as buffer.FromProto checks them,
// strings printable, codes known, no trailing bytes) and a packet is all or
// nothing: one bad record fails the whole packet, and nothing of it is
// returned. Errors wrap rdmamgr.ErrProtocol, ErrVersion for another
// version; a batch that cannot take one more record says ErrFull.
//
// The socket helpers are Linux only; elsewhere they fail with
// rdmamgr.ErrNotSupported.
package agentwire
