//go:build ibverbs

package ib

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

// The wrappers keep libibverbs' static inline functions, macros and unions
// on the C side.

static struct ibv_mr *goccl_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

static int goccl_query_port(struct ibv_context *ctx, int port, int gid_index, uint16_t *lid,
		int *active, int *mtu, uint8_t *gid) {
	struct ibv_port_attr pa;
	union ibv_gid g;
	int rc = ibv_query_port(ctx, port, &pa);
	if (rc) return rc;
	*lid = pa.lid;
	*active = pa.state == IBV_PORT_ACTIVE;
	*mtu = pa.active_mtu;
	memset(&g, 0, sizeof g);
	if (gid_index >= pa.gid_tbl_len) return pa.lid ? 0 : EINVAL; // RoCE needs the GID
	rc = ibv_query_gid(ctx, port, gid_index, &g);
	if (rc) return rc < 0 ? -rc : rc;
	memcpy(gid, g.raw, 16);
	return 0;
}

static int goccl_port_count(struct ibv_context *ctx) {
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da)) return -1;
	return da.phys_port_cnt;
}

static struct ibv_cq *goccl_create_cq(struct ibv_context *ctx, int entries, struct ibv_comp_channel **chp) {
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!ch) return NULL;
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		ibv_destroy_comp_channel(ch);
		return NULL;
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, entries, NULL, ch, 0);
	if (!cq) {
		ibv_destroy_comp_channel(ch);
		return NULL;
	}
	*chp = ch;
	return cq;
}

static int goccl_arm(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// goccl_wait waits up to timeout_ms for an event on the channel: 1 with an
// event (acknowledged), 0 on timeout, -1 on error.
static int goccl_wait(struct ibv_comp_channel *ch, struct ibv_cq *cq, int timeout_ms) {
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int rc = poll(&pfd, 1, timeout_ms);
	if (rc <= 0) return rc < 0 && errno != EINTR ? -1 : 0;
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx)) return errno == EAGAIN ? 0 : -1;
	ibv_ack_cq_events(ev_cq, 1);
	return 1;
}

typedef struct {
	uint64_t id;
	uint32_t status, opcode, len, imm, qpn, vendor;
} goccl_wc;

static int goccl_poll(struct ibv_cq *cq, int n, goccl_wc *out) {
	struct ibv_wc wc[32];
	if (n > 32) n = 32;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].len = wc[i].byte_len;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
		out[i].qpn = wc[i].qp_num;
		out[i].vendor = wc[i].vendor_err;
	}
	return got;
}

static struct ibv_qp *goccl_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int send, int recv, int inl) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = send;
	a.cap.max_recv_wr = recv;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = inl;
	return ibv_create_qp(pd, &a);
}

static int goccl_to_init(struct ibv_qp *qp, int port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int goccl_to_rtr(struct ibv_qp *qp, int port, uint16_t dlid, const uint8_t *dgid, int use_gid,
		int gid_index, uint32_t dqpn, uint32_t rpsn, int mtu, int min_rnr, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = rd_atom;
	a.min_rnr_timer = min_rnr;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	a.ah_attr.port_num = port;
	if (use_gid) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int goccl_to_rts(struct ibv_qp *qp, uint32_t psn, int timeout, int retry, int rnr, int rd_atom) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr;
	a.max_rd_atomic = rd_atom;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int goccl_to_err(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int goccl_post_send(struct ibv_qp *qp, uint64_t id, int op, uint64_t addr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint32_t imm, int signaled) {
	struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	switch (op) {
	case 0: wr.opcode = IBV_WR_SEND; break;
	case 1: wr.opcode = IBV_WR_RDMA_WRITE; break;
	case 2: wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; wr.imm_data = htonl(imm); break;
	case 3: wr.opcode = IBV_WR_RDMA_READ; break;
	default: return EINVAL;
	}
	wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static int goccl_post_recv(struct ibv_qp *qp, uint64_t id, uint64_t addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	return ibv_post_recv(qp, &wr, &bad);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// This file is the libibverbs provider (build tag ibverbs). Each method is
// one verbs call or a short C wrapper around one; memory registered with
// RegMR is pinned with a runtime.Pinner until Dereg, so the adapter may
// keep its address (the cgo pointer rules allow C to retain a pinned Go
// pointer).

// Verbs returns the libibverbs provider.
func Verbs() Provider { return verbsProvider{} }

type verbsProvider struct{}

func errnoErr(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	if rc < 0 {
		rc = -rc
	}
	return fmt.Errorf("%s: %w", op, syscall.Errno(rc))
}

func lastErr(op string, err error) error {
	if err == nil {
		err = errors.New("failed")
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (verbsProvider) Open(name string, port, gidIndex int) (Device, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, lastErr("ib: no RDMA devices (is an RDMA driver loaded?): ibv_get_device_list", err)
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	var tried []string
	for _, d := range devs {
		dn := C.GoString(C.ibv_get_device_name(d))
		if name != "" && dn != name {
			continue
		}
		tried = append(tried, dn)
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			if name != "" {
				return nil, lastErr("ibv_open_device "+dn, err)
			}
			continue
		}
		dev, err := openPort(ctx, dn, port, gidIndex)
		if err == nil {
			return dev, nil
		}
		C.ibv_close_device(ctx)
		if name != "" {
			return nil, err
		}
	}
	if name != "" && len(tried) == 0 {
		return nil, fmt.Errorf("ib: no device %q", name)
	}
	return nil, fmt.Errorf("ib: no device with an active port (tried %v)", tried)
}

// openPort finds the port (the first active one when port is 0) and
// allocates the protection domain.
func openPort(ctx *C.struct_ibv_context, name string, port, gidIndex int) (Device, error) {
	ports := []int{port}
	if port == 0 {
		cnt := int(C.goccl_port_count(ctx))
		if cnt < 1 {
			return nil, fmt.Errorf("ib: %s: ibv_query_device failed", name)
		}
		ports = ports[:0]
		for p := 1; p <= cnt; p++ {
			ports = append(ports, p)
		}
	}
	for _, p := range ports {
		var (
			lid    C.uint16_t
			active C.int
			mtu    C.int
			gid    [16]byte
		)
		if rc := C.goccl_query_port(ctx, C.int(p), C.int(gidIndex), &lid, &active, &mtu, (*C.uint8_t)(unsafe.Pointer(&gid[0]))); rc != 0 {
			return nil, errnoErr(fmt.Sprintf("ib: %s: ibv_query_port %d", name, p), rc)
		}
		if active == 0 && port == 0 {
			continue
		}
		pd, err := C.ibv_alloc_pd(ctx)
		if pd == nil {
			return nil, lastErr("ib: "+name+": ibv_alloc_pd", err)
		}
		return &verbsDevice{ctx: ctx, pd: pd, name: name,
			port: PortInfo{Num: p, LID: uint16(lid), GID: gid, Active: active != 0, MTU: MTU(mtu)}}, nil
	}
	return nil, fmt.Errorf("ib: %s: no active port", name)
}

type verbsDevice struct {
	ctx  *C.struct_ibv_context
	pd   *C.struct_ibv_pd
	name string
	port PortInfo
}

func (d *verbsDevice) Name() string   { return d.name }
func (d *verbsDevice) Port() PortInfo { return d.port }

func (d *verbsDevice) RegMR(b []byte, access Access) (MR, error) {
	if len(b) == 0 {
		return nil, errors.New("ib: register an empty region")
	}
	m := &verbsMR{}
	m.pin.Pin(&b[0])
	mr, err := C.goccl_reg_mr(d.pd, unsafe.Pointer(&b[0]), C.size_t(len(b)), C.int(access))
	if mr == nil {
		m.pin.Unpin()
		return nil, lastErr("ibv_reg_mr", err)
	}
	m.mr = mr
	return m, nil
}

type verbsMR struct {
	mr  *C.struct_ibv_mr
	pin runtime.Pinner
}

func (m *verbsMR) LKey() uint32 { return uint32(m.mr.lkey) }
func (m *verbsMR) RKey() uint32 { return uint32(m.mr.rkey) }

func (m *verbsMR) Dereg() error {
	rc := C.ibv_dereg_mr(m.mr)
	m.pin.Unpin()
	return errnoErr("ibv_dereg_mr", rc)
}

func (d *verbsDevice) CreateCQ(entries int) (CQ, error) {
	var ch *C.struct_ibv_comp_channel
	cq, err := C.goccl_create_cq(d.ctx, C.int(entries), &ch)
	if cq == nil {
		return nil, lastErr("ibv_create_cq", err)
	}
	return &verbsCQ{cq: cq, ch: ch}, nil
}

type verbsCQ struct {
	cq  *C.struct_ibv_cq
	ch  *C.struct_ibv_comp_channel
	mu  sync.Mutex
	wcs [32]C.goccl_wc
}

var wcOps = map[C.uint32_t]WCOpcode{
	C.IBV_WC_SEND: WCSend, C.IBV_WC_RDMA_WRITE: WCWrite, C.IBV_WC_RDMA_READ: WCRead,
	C.IBV_WC_RECV: WCRecv, C.IBV_WC_RECV_RDMA_WITH_IMM: WCRecvImm,
}

func (c *verbsCQ) Poll(wc []WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := C.goccl_poll(c.cq, C.int(min(len(wc), len(c.wcs))), &c.wcs[0])
	if n < 0 {
		return 0, fmt.Errorf("ibv_poll_cq: %d", int(n))
	}
	for i := range int(n) {
		w := &c.wcs[i]
		wc[i] = WC{ID: uint64(w.id), Status: Status(w.status), Op: wcOps[w.opcode], Len: uint32(w.len),
			Imm: uint32(w.imm), QPN: uint32(w.qpn), Vendor: uint32(w.vendor)}
	}
	return int(n), nil
}

func (c *verbsCQ) Arm() error { return errnoErr("ibv_req_notify_cq", C.goccl_arm(c.cq)) }

// Wait polls the channel's descriptor in slices of 50 ms so that ctx is
// honoured without a thread stuck in the kernel.
func (c *verbsCQ) Wait(ctx context.Context) error {
	for {
		ms := 50
		if dl, ok := ctx.Deadline(); ok {
			ms = min(ms, max(int(time.Until(dl)/time.Millisecond), 0))
		}
		switch C.goccl_wait(c.ch, c.cq, C.int(ms)) {
		case 1:
			return nil
		case -1:
			return errors.New("ib: completion channel: ibv_get_cq_event failed")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (c *verbsCQ) Close() error {
	err := errnoErr("ibv_destroy_cq", C.ibv_destroy_cq(c.cq))
	if rc := C.ibv_destroy_comp_channel(c.ch); rc != 0 && err == nil {
		err = errnoErr("ibv_destroy_comp_channel", rc)
	}
	return err
}

func (d *verbsDevice) CreateQP(cq CQ, caps QPCaps) (QP, error) {
	vc, ok := cq.(*verbsCQ)
	if !ok {
		return nil, errors.New("ib: completion queue of another provider")
	}
	qp, err := C.goccl_create_qp(d.pd, vc.cq, C.int(caps.SendDepth), C.int(caps.RecvDepth), C.int(caps.InlineData))
	if qp == nil {
		return nil, lastErr("ibv_create_qp", err)
	}
	return &verbsQP{qp: qp}, nil
}

func (d *verbsDevice) Close() error {
	err := errnoErr("ibv_dealloc_pd", C.ibv_dealloc_pd(d.pd))
	if rc := C.ibv_close_device(d.ctx); rc != 0 && err == nil {
		err = errnoErr("ibv_close_device", rc)
	}
	return err
}

type verbsQP struct {
	qp *C.struct_ibv_qp
}

func (q *verbsQP) Num() uint32 { return uint32(q.qp.qp_num) }

func (q *verbsQP) Init(port int, access Access) error {
	return errnoErr("ibv_modify_qp INIT", C.goccl_to_init(q.qp, C.int(port), C.int(access)))
}

func (q *verbsQP) ReadyToReceive(a RTRAttr) error {
	useGID := 0
	if a.UseGID {
		useGID = 1
	}
	gid := a.RemoteGID
	return errnoErr("ibv_modify_qp RTR", C.goccl_to_rtr(q.qp, C.int(a.Port), C.uint16_t(a.RemoteLID),
		(*C.uint8_t)(unsafe.Pointer(&gid[0])), C.int(useGID), C.int(a.GIDIndex), C.uint32_t(a.RemoteQPN),
		C.uint32_t(a.RemotePSN), C.int(a.MTU), C.int(a.MinRNRTime), C.int(a.MaxRdAtom)))
}

func (q *verbsQP) ReadyToSend(a RTSAttr) error {
	return errnoErr("ibv_modify_qp RTS", C.goccl_to_rts(q.qp, C.uint32_t(a.PSN), C.int(a.Timeout),
		C.int(a.RetryCnt), C.int(a.RNRRetry), C.int(a.MaxRdAtom)))
}

func (q *verbsQP) PostSend(wr *SendWR) error {
	sig := 0
	if wr.Signaled {
		sig = 1
	}
	return errnoErr("ibv_post_send", C.goccl_post_send(q.qp, C.uint64_t(wr.ID), C.int(wr.Op), C.uint64_t(wr.Addr),
		C.uint32_t(wr.Len), C.uint32_t(wr.LKey), C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint32_t(wr.Imm), C.int(sig)))
}

func (q *verbsQP) PostRecv(wr *RecvWR) error {
	return errnoErr("ibv_post_recv", C.goccl_post_recv(q.qp, C.uint64_t(wr.ID), C.uint64_t(wr.Addr), C.uint32_t(wr.Len), C.uint32_t(wr.LKey)))
}

func (q *verbsQP) SetError() error { return errnoErr("ibv_modify_qp ERR", C.goccl_to_err(q.qp)) }

func (q *verbsQP) Close() error { return errnoErr("ibv_destroy_qp", C.ibv_destroy_qp(q.qp)) }
