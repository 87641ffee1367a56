//go:build ibverbs

#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>

struct ibv_device *rm_dev_at(struct ibv_device **l, int i) { return l[i]; }

int rm_query_device(struct ibv_context *ctx, struct rm_dev *out)
{
	struct ibv_device_attr a;
	int rc = ibv_query_device(ctx, &a);
	if (rc)
		return rc;
	out->phys_port_cnt = a.phys_port_cnt;
	out->max_cqe = a.max_cqe;
	out->max_qp_wr = a.max_qp_wr;
	out->max_qp_rd_atom = a.max_qp_rd_atom;
	out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	out->max_qp = a.max_qp;
	out->atomic_cap = (int32_t)a.atomic_cap;
	return 0;
}

int rm_query_port(struct ibv_context *ctx, int port, struct rm_port *out)
{
	struct ibv_port_attr a;
	int rc = ibv_query_port(ctx, (uint8_t)port, &a);
	if (rc)
		return rc;
	out->state = a.state;
	out->link_layer = a.link_layer;
	out->active_mtu = a.active_mtu;
	out->max_mtu = a.max_mtu;
	out->max_msg_sz = a.max_msg_sz;
	out->gid_tbl_len = a.gid_tbl_len;
	out->lid = a.lid;
	return 0;
}

int rm_query_gid(struct ibv_context *ctx, int port, int idx, struct rm_gid *out)
{
	struct ibv_gid_entry e;
	int rc = ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)idx, &e, 0);
	if (rc == 0) {
		memcpy(out->raw, e.gid.raw, 16);
		out->type = (int32_t)e.gid_type;
		return 0;
	}
	/* Older kernels: the plain query has no type. An empty entry of the
	 * extended query (ENODATA) is reported as all-zero. */
	if (rc == ENODATA) {
		memset(out->raw, 0, 16);
		out->type = -1;
		return 0;
	}
	union ibv_gid g;
	if (ibv_query_gid(ctx, (uint8_t)port, idx, &g))
		return errno ? errno : EINVAL;
	memcpy(out->raw, g.raw, 16);
	out->type = -1;
	return 0;
}

int rm_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	return 0;
}

struct ibv_mr *rm_reg_mr(struct ibv_pd *pd, uint64_t addr, uint64_t len, int access)
{
	return ibv_reg_mr(pd, (void *)(uintptr_t)addr, (size_t)len, access);
}

uint32_t rm_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
uint32_t rm_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }

struct ibv_qp *rm_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int max_send_wr, int max_recv_wr)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = (uint32_t)max_send_wr;
	a.cap.max_recv_wr = (uint32_t)max_recv_wr; /* the control ring (ctl.go) */
	a.cap.max_send_sge = 2;                    /* a Send: header + message */
	a.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &a);
}

uint32_t rm_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

int rm_qp_init(struct ibv_qp *qp, int port, int atomics)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	/* What the peer may do through this QP; each MR narrows it further. */
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (atomics)
		a.qp_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int rm_qp_rtr(struct ibv_qp *qp, int port, uint32_t dqpn, uint32_t rq_psn, int mtu,
	      int is_global, uint16_t dlid, const uint8_t *dgid, int sgid_idx, int max_dest_rd)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = (uint8_t)max_dest_rd;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = (uint8_t)port;
	a.ah_attr.dlid = dlid;
	if (is_global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)sgid_idx;
		a.ah_attr.grh.hop_limit = 64;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int rm_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int timeout, int retry, int max_rd)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	a.timeout = (uint8_t)timeout;
	a.retry_cnt = (uint8_t)retry;
	a.rnr_retry = 7;
	a.max_rd_atomic = (uint8_t)max_rd;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

int rm_qp_to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}
