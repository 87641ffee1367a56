// Small C helpers for the ibverbs backend (build tag ibverbs). They hide
// unions, macros and static-inline verbs from cgo, and batch: one call posts
// a chain of work requests, one call polls up to N completions.
#ifndef RDMAMGR_SHIM_H
#define RDMAMGR_SHIM_H

#include <infiniband/verbs.h>
#include <stdint.h>

// One signalled work request: an RDMA WRITE or READ (one SGE), an atomic
// (one 8-byte SGE for the old value; compare_add is the compare value of a
// compare-and-swap or the addend of a fetch-and-add) or a SEND (one SGE, or
// two when len2 > 0).
struct rm_wr {
	uint64_t wr_id;
	uint64_t laddr;
	uint64_t raddr;
	uint64_t laddr2;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t len;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t opcode; // enum ibv_wr_opcode
	uint32_t len2;
	uint32_t lkey2;
};

// The fields of a work completion the backend uses.
struct rm_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t qp_num;
	uint32_t byte_len;
	uint32_t pad;
};

// An asynchronous event.
struct rm_async {
	int32_t type;
	uint32_t qp_num; // QP events only
	int32_t port;    // port events only
	int32_t pad;
};

struct rm_port {
	int32_t state;
	int32_t link_layer;
	int32_t active_mtu;
	int32_t max_mtu;
	uint32_t max_msg_sz;
	int32_t gid_tbl_len;
	uint16_t lid;
	uint16_t pad;
};

struct rm_dev {
	int32_t phys_port_cnt;
	int32_t max_cqe;
	int32_t max_qp_wr;
	int32_t max_qp_rd_atom;
	int32_t max_qp_init_rd_atom;
	int32_t max_qp;
	int32_t atomic_cap; // enum ibv_atomic_cap
	int32_t pad;
};

struct rm_gid {
	uint8_t raw[16];
	int32_t type; // enum ibv_gid_type, -1 if unknown
};

struct ibv_device *rm_dev_at(struct ibv_device **l, int i);
int rm_query_device(struct ibv_context *ctx, struct rm_dev *out);
int rm_query_port(struct ibv_context *ctx, int port, struct rm_port *out);
int rm_query_gid(struct ibv_context *ctx, int port, int idx, struct rm_gid *out);
int rm_set_nonblock(int fd);

struct ibv_mr *rm_reg_mr(struct ibv_pd *pd, uint64_t addr, uint64_t len, int access);
uint32_t rm_mr_lkey(struct ibv_mr *mr);
uint32_t rm_mr_rkey(struct ibv_mr *mr);

struct ibv_qp *rm_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int max_send_wr, int max_recv_wr);
uint32_t rm_qp_num(struct ibv_qp *qp);
int rm_qp_init(struct ibv_qp *qp, int port, int atomics);
int rm_qp_rtr(struct ibv_qp *qp, int port, uint32_t dqpn, uint32_t rq_psn, int mtu,
	      int is_global, uint16_t dlid, const uint8_t *dgid, int sgid_idx, int max_dest_rd);
int rm_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int timeout, int retry, int max_rd);
int rm_qp_to_err(struct ibv_qp *qp);

int rm_post(struct ibv_qp *qp, struct rm_wr *wrs, int n, int *nposted);
int rm_post_probe(struct ibv_qp *qp, uint64_t wr_id);
int rm_post_recv(struct ibv_qp *qp, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey);
int rm_poll(struct ibv_cq *cq, struct rm_wc *out, int n);
int rm_arm(struct ibv_cq *cq);
int rm_wait_cq(struct ibv_comp_channel *ch, int wakefd);
int rm_wait_async(struct ibv_context *ctx, int wakefd, struct rm_async *ev);

#endif
