//go:build ibverbs

// The data path of the shim: posts (sends, receives, probes), polls and
// the waits of the poller and the async-event goroutine.

#include "shim.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* Fills w (and its SGEs s[0..1]) from r. */
static void rm_fill(struct ibv_send_wr *w, struct ibv_sge *s, const struct rm_wr *r)
{
	memset(w, 0, sizeof *w);
	s[0].addr = r->laddr;
	s[0].length = r->len;
	s[0].lkey = r->lkey;
	w->wr_id = r->wr_id;
	w->sg_list = s;
	w->num_sge = 1;
	w->opcode = (enum ibv_wr_opcode)r->opcode;
	w->send_flags = IBV_SEND_SIGNALED;
	switch (w->opcode) {
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->wr.atomic.remote_addr = r->raddr;
		w->wr.atomic.compare_add = r->compare_add;
		w->wr.atomic.swap = r->swap;
		w->wr.atomic.rkey = r->rkey;
		break;
	case IBV_WR_SEND:
		if (r->len2) {
			s[1].addr = r->laddr2;
			s[1].length = r->len2;
			s[1].lkey = r->lkey2;
			w->num_sge = 2;
		}
		break;
	default:
		w->wr.rdma.remote_addr = r->raddr;
		w->wr.rdma.rkey = r->rkey;
	}
}

/* Posts n signalled work requests as one chain: one ibv_post_send, one
 * doorbell. *nposted tells how many were accepted (all of them on
 * success). Returns 0 or an errno. */
int rm_post(struct ibv_qp *qp, struct rm_wr *wrs, int n, int *nposted)
{
	struct ibv_send_wr ws[64], *w = ws, *bad = NULL;
	struct ibv_sge ss[64][2], (*s)[2] = ss;
	int i, rc;
	*nposted = 0;
	if (n <= 0)
		return 0;
	if (n > 64) {
		w = malloc((size_t)n * sizeof *w);
		s = malloc((size_t)n * sizeof *s);
		if (!w || !s) {
			free(w);
			free(s);
			return ENOMEM;
		}
	}
	for (i = 0; i < n; i++) {
		rm_fill(&w[i], s[i], &wrs[i]);
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
	}
	rc = ibv_post_send(qp, w, &bad);
	*nposted = rc ? (bad ? (int)(bad - w) : 0) : n;
	if (w != ws) {
		free(w);
		free(s);
	}
	return rc;
}

/* Posts one receive of len bytes at addr. Returns 0 or an errno. */
int rm_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey)
{
	struct ibv_recv_wr w, *bad = NULL;
	struct ibv_sge s;
	s.addr = addr;
	s.length = len;
	s.lkey = lkey;
	memset(&w, 0, sizeof w);
	w.wr_id = wr_id;
	w.sg_list = &s;
	w.num_sge = 1;
	return ibv_post_recv(qp, &w, &bad);
}

/* A zero-length signalled RDMA WRITE: no memory is touched on either side
 * and no rkey is checked, but the peer's QP must answer (liveness probe). */
int rm_post_probe(struct ibv_qp *qp, uint64_t wr_id)
{
	struct ibv_send_wr w, *bad = NULL;
	memset(&w, 0, sizeof w);
	w.wr_id = wr_id;
	w.opcode = IBV_WR_RDMA_WRITE;
	w.send_flags = IBV_SEND_SIGNALED;
	w.num_sge = 0;
	return ibv_post_send(qp, &w, &bad);
}

/* Polls up to n completions into out; returns the count or -1. */
int rm_poll(struct ibv_cq *cq, struct rm_wc *out, int n)
{
	struct ibv_wc wc[32];
	int total = 0;
	while (total < n) {
		int k = n - total, got, i;
		if (k > 32)
			k = 32;
		got = ibv_poll_cq(cq, k, wc);
		if (got < 0)
			return total ? total : -1;
		for (i = 0; i < got; i++) {
			struct rm_wc *o = &out[total + i];
			o->wr_id = wc[i].wr_id;
			o->status = wc[i].status;
			o->opcode = wc[i].opcode;
			o->vendor_err = wc[i].vendor_err;
			o->qp_num = wc[i].qp_num;
			o->byte_len = wc[i].byte_len;
			o->pad = 0;
		}
		total += got;
		if (got < k)
			break;
	}
	return total;
}

int rm_arm(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

/* Blocks until the completion channel has an event (consumed and acked:
 * returns 1) or wakefd is readable (returns 0). -errno on failure. The
 * channel's fd must be non-blocking. */
int rm_wait_cq(struct ibv_comp_channel *ch, int wakefd)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = ch->fd, .events = POLLIN }, { .fd = wakefd, .events = POLLIN } };
		int r = poll(p, 2, -1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[1].revents)
			return 0;
		if (p[0].revents & POLLIN) {
			struct ibv_cq *cq;
			void *cq_ctx;
			if (ibv_get_cq_event(ch, &cq, &cq_ctx)) {
				if (errno == EAGAIN || errno == EINTR)
					continue;
				return -errno;
			}
			ibv_ack_cq_events(cq, 1);
			return 1;
		}
		if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
			return -EIO;
	}
}

/* Blocks until an async event arrives (copied to ev, acked: returns 1) or
 * wakefd is readable (returns 0). -errno on failure. The context's
 * async_fd must be non-blocking. */
int rm_wait_async(struct ibv_context *ctx, int wakefd, struct rm_async *ev)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = ctx->async_fd, .events = POLLIN }, { .fd = wakefd, .events = POLLIN } };
		int r = poll(p, 2, -1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[1].revents)
			return 0;
		if (p[0].revents & POLLIN) {
			struct ibv_async_event e;
			if (ibv_get_async_event(ctx, &e)) {
				if (errno == EAGAIN || errno == EINTR)
					continue;
				return -errno;
			}
			memset(ev, 0, sizeof *ev);
			ev->type = e.event_type;
			switch (e.event_type) {
			case IBV_EVENT_QP_FATAL:
			case IBV_EVENT_QP_REQ_ERR:
			case IBV_EVENT_QP_ACCESS_ERR:
			case IBV_EVENT_COMM_EST:
			case IBV_EVENT_SQ_DRAINED:
			case IBV_EVENT_PATH_MIG:
			case IBV_EVENT_PATH_MIG_ERR:
			case IBV_EVENT_QP_LAST_WQE_REACHED:
				ev->qp_num = e.element.qp ? e.element.qp->qp_num : 0;
				break;
			case IBV_EVENT_PORT_ACTIVE:
			case IBV_EVENT_PORT_ERR:
			case IBV_EVENT_LID_CHANGE:
			case IBV_EVENT_PKEY_CHANGE:
			case IBV_EVENT_SM_CHANGE:
			case IBV_EVENT_CLIENT_REREGISTER:
			case IBV_EVENT_GID_CHANGE:
				ev->port = e.element.port_num;
				break;
			default:
				break;
			}
			ibv_ack_async_event(&e);
			return 1;
		}
		if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
			return -EIO;
	}
}
