// Package uploadapi implements DebuginfoService (upload decisions, records, deletion) and the
// symbolizer's own raw upload endpoint `PUT /upload/<upload_id>`, used when the store cannot
// presign URLs (the folder store).
package uploadapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/services/symbolizer/internal/auth"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/coverage"
	"github.com/profsym/profsym/services/symbolizer/internal/kernelpkg"
	"github.com/profsym/profsym/services/symbolizer/internal/metrics"
	"github.com/profsym/profsym/services/symbolizer/internal/tenant"
)

// Service is the DebuginfoService handler.
type Service struct {
	meta *catalog.Catalog
	m    *metrics.Metrics
	log  *slog.Logger
	// PublicURL is the base URL clients reach this server at, for upload URLs; when empty
	// it is taken from the request.
	PublicURL string
	// Changed is called after a file is stored or deleted (to drop cached resolutions).
	Changed func()
	// Coverage answers ListCoverage; nil answers it Unimplemented.
	Coverage *coverage.Recorder
	// Admit, when set, is asked before an upload is reserved (a tenant's quota, see
	// tenant.Limiter); an error wrapping tenant.ErrQuota is answered resource_exhausted.
	Admit func(ctx context.Context, size uint64) error
}

// New returns the service.
func New(md *catalog.Catalog, m *metrics.Metrics, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{meta: md, m: m, log: log}
}

// WriteProcedures are the procedures that always need a token.
var WriteProcedures = map[string]bool{
	debuginfov1connect.DebuginfoServiceShouldUploadProcedure:   true,
	debuginfov1connect.DebuginfoServiceInitiateUploadProcedure: true,
	debuginfov1connect.DebuginfoServiceFinishUploadProcedure:   true,
	debuginfov1connect.DebuginfoServiceDeleteProcedure:         true,
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

type descReq interface {
	GetBuildId() string
	GetBuildIdType() debuginfov1.BuildIDType
	GetType() debuginfov1.DebuginfoType
	GetSha256() string
	GetSize() uint64
	GetSource() debuginfov1.UploadSource
}

func desc(r descReq) (catalog.Desc, error) {
	if r.GetBuildIdType() == debuginfov1.BuildIDType_BUILD_ID_TYPE_UNSPECIFIED {
		return catalog.Desc{}, invalid("build_id_type: required")
	}
	if err := catalog.ValidateID(r.GetBuildIdType(), r.GetBuildId()); err != nil {
		return catalog.Desc{}, invalid("build_id: %v", err)
	}
	if _, ok := debuginfov1.DebuginfoType_name[int32(r.GetType())]; !ok || r.GetType() == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_UNSPECIFIED {
		return catalog.Desc{}, invalid("type: required")
	}
	if r.GetType() == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE && r.GetBuildIdType() != debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU {
		return catalog.Desc{}, invalid("build_id_type: a DWARF package is stored under the GNU build ID of its executable")
	}
	if _, ok := debuginfov1.UploadSource_name[int32(r.GetSource())]; !ok || r.GetSource() == debuginfov1.UploadSource_UPLOAD_SOURCE_UNSPECIFIED {
		return catalog.Desc{}, invalid("source: required")
	}
	if s := r.GetSha256(); len(s) != 64 || catalog.ValidateID(debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, s) != nil {
		return catalog.Desc{}, invalid("sha256: not 64 lower-case hex digits")
	}
	if r.GetSize() == 0 {
		return catalog.Desc{}, invalid("size: required (greater than zero)")
	}
	d := catalog.Desc{
		BuildID: catalog.ID{Type: r.GetBuildIdType(), ID: r.GetBuildId()},
		Type:    r.GetType(), SHA256: r.GetSha256(), Size: r.GetSize(), Source: r.GetSource(),
	}
	if n, ok := r.(interface{ GetName() string }); ok {
		if err := checkName(n.GetName()); err != nil {
			return catalog.Desc{}, invalid("name: %v", err)
		}
		d.Name = n.GetName()
	}
	return d, nil
}

// checkName accepts a binary's name: at most 255 bytes of UTF-8 without control characters.
func checkName(name string) error {
	if len(name) > 255 {
		return fmt.Errorf("%d bytes, over 255", len(name))
	}
	if !utf8.ValidString(name) {
		return errors.New("not UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U", r)
		}
	}
	return nil
}

// storeErr maps a store failure to UNAVAILABLE.
func storeErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeOf(err), err)
	}
	return connect.NewError(connect.CodeUnavailable, err)
}

// ShouldUpload implements the RPC.
func (s *Service) ShouldUpload(ctx context.Context, req *connect.Request[debuginfov1.ShouldUploadRequest]) (*connect.Response[debuginfov1.ShouldUploadResponse], error) {
	d, err := desc(req.Msg)
	if err != nil {
		return nil, err
	}
	dec, err := s.meta.ShouldUpload(ctx, d)
	if err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(&debuginfov1.ShouldUploadResponse{ShouldUpload: dec.Upload, Reason: dec.Reason, Message: dec.Message}), nil
}

// InitiateUpload implements the RPC.
func (s *Service) InitiateUpload(ctx context.Context, req *connect.Request[debuginfov1.InitiateUploadRequest]) (*connect.Response[debuginfov1.InitiateUploadResponse], error) {
	d, err := desc(req.Msg)
	if err != nil {
		return nil, err
	}
	if s.Admit != nil {
		// Only an upload that would be reserved counts: a retry of a live upload, or one the
		// decision refuses, is answered as without a quota.
		dec, err := s.meta.ShouldUpload(ctx, d)
		if err != nil {
			return nil, storeErr(err)
		}
		if dec.Upload {
			if err := s.Admit(ctx, d.Size); errors.Is(err, tenant.ErrQuota) {
				s.count("over_quota")
				return nil, connect.NewError(connect.CodeResourceExhausted, err)
			} else if err != nil {
				return nil, storeErr(err)
			}
		}
	}
	up, err := s.meta.Initiate(ctx, d)
	var de *catalog.DecisionError
	if errors.As(err, &de) {
		code := connect.CodeAlreadyExists
		switch de.Reason {
		case debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS:
			code = connect.CodeAborted
		case debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_TOO_LARGE:
			code = connect.CodeResourceExhausted
		}
		ce := connect.NewError(code, fmt.Errorf("%s: %s", de.Reason, de.Message))
		return nil, ce
	}
	if err != nil {
		return nil, storeErr(err)
	}
	ttl := time.Until(up.ExpiresAt)
	url, headers, presigned, err := s.meta.Store().PresignPut(ctx, up.Object(), max(ttl, time.Second))
	if err != nil {
		return nil, storeErr(err)
	}
	if !presigned {
		url = s.baseURL(ctx) + "/upload/" + up.ID
		headers = map[string]string{"Content-Type": "application/octet-stream"}
	}
	return connect.NewResponse(&debuginfov1.InitiateUploadResponse{
		UploadId: up.ID, UploadUrl: url, Method: http.MethodPut, RequiredHeaders: headers,
		ExpiresAt: timestamppb.New(up.ExpiresAt), MaxSize: s.meta.MaxSize(),
	}), nil
}

type baseURLKey struct{}

// WithBaseURL wraps h so handlers know the scheme and host the client used, for upload URLs.
func WithBaseURL(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		ctx := context.WithValue(r.Context(), baseURLKey{}, scheme+"://"+r.Host)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (s *Service) baseURL(ctx context.Context) string {
	if s.PublicURL != "" {
		return strings.TrimSuffix(s.PublicURL, "/")
	}
	u, _ := ctx.Value(baseURLKey{}).(string)
	return u
}

// FinishUpload implements the RPC.
func (s *Service) FinishUpload(ctx context.Context, req *connect.Request[debuginfov1.FinishUploadRequest]) (*connect.Response[debuginfov1.FinishUploadResponse], error) {
	id, err := anyTypedID(req.Msg.GetBuildId())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetUploadId() == "" {
		return nil, invalid("upload_id: required")
	}
	var rec *catalog.Record
	for _, cand := range id {
		rec, err = s.meta.Finish(ctx, cand, req.Msg.GetUploadId())
		if !errors.Is(err, catalog.ErrNotFound) {
			break
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, catalog.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, catalog.ErrNotUploaded), errors.Is(err, catalog.ErrVerification):
		s.count("rejected")
		s.log.Warn("upload rejected", "build_id", req.Msg.GetBuildId(), "upload_id", req.Msg.GetUploadId(), "err", err)
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	default:
		return nil, storeErr(err)
	}
	if s.m != nil && rec.Current.UploadID == req.Msg.GetUploadId() {
		s.m.StoredBytes.Add(float64(rec.Current.Size))
	}
	s.count("ok")
	if s.Changed != nil {
		s.Changed()
	}
	s.log.Info("upload stored", "build_id", rec.Current.BuildID.String(), "type", rec.Current.Type, "source", rec.Current.Source, "size", rec.Current.Size)
	d, err := s.meta.Describe(ctx, rec)
	if err != nil {
		return nil, storeErr(err)
	}
	return connect.NewResponse(&debuginfov1.FinishUploadResponse{Debuginfo: d}), nil
}

func (s *Service) count(result string) {
	if s.m != nil {
		s.m.Uploads.WithLabelValues(result).Inc()
	}
}

// anyTypedID lists the typed IDs a bare ID string can be (FinishUpload carries no type).
func anyTypedID(id string) ([]catalog.ID, error) {
	types := catalog.CandidateTypes(id)
	if len(types) == 0 {
		return nil, invalid("build_id: %q is not a GNU build ID, Go build ID or htlhash", id)
	}
	out := make([]catalog.ID, len(types))
	for i, t := range types {
		out[i] = catalog.ID{Type: t, ID: id}
	}
	return out, nil
}

func (s *Service) lookupIDs(id string, typ debuginfov1.BuildIDType) ([]catalog.ID, error) {
	if typ == debuginfov1.BuildIDType_BUILD_ID_TYPE_UNSPECIFIED {
		return anyTypedID(id)
	}
	if err := catalog.ValidateID(typ, id); err != nil {
		return nil, invalid("build_id: %v", err)
	}
	return []catalog.ID{{Type: typ, ID: id}}, nil
}

// Get implements the RPC.
func (s *Service) Get(ctx context.Context, req *connect.Request[debuginfov1.GetRequest]) (*connect.Response[debuginfov1.GetResponse], error) {
	ids, err := s.lookupIDs(req.Msg.GetBuildId(), req.Msg.GetBuildIdType())
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		rec, err := s.meta.Resolve(ctx, id)
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, storeErr(err)
		}
		d, err := s.meta.Describe(ctx, rec)
		if err != nil {
			return nil, storeErr(err)
		}
		return connect.NewResponse(&debuginfov1.GetResponse{Debuginfo: d}), nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("nothing is stored under %s", req.Msg.GetBuildId()))
}

// List implements the RPC.
func (s *Service) List(ctx context.Context, req *connect.Request[debuginfov1.ListRequest]) (*connect.Response[debuginfov1.ListResponse], error) {
	n := int(req.Msg.GetPageSize())
	if n == 0 {
		n = 100
	}
	n = min(n, 1000)
	list, next, err := s.meta.List(ctx, n, req.Msg.GetPageToken())
	if err != nil {
		if strings.Contains(err.Error(), "page token") {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		return nil, storeErr(err)
	}
	return connect.NewResponse(&debuginfov1.ListResponse{Debuginfos: list, NextPageToken: next}), nil
}

// ListCoverage implements the RPC. Entries of kernel images and modules say which kernel they
// are and the packages of its debuginfo (kernelpkg).
func (s *Service) ListCoverage(ctx context.Context, req *connect.Request[debuginfov1.ListCoverageRequest]) (*connect.Response[debuginfov1.ListCoverageResponse], error) {
	if s.Coverage == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this server records no coverage"))
	}
	if _, ok := debuginfov1.CoverageReason_name[int32(req.Msg.GetReason())]; !ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reason %d is not a CoverageReason", req.Msg.GetReason()))
	}
	f := coverage.Filter{Reason: req.Msg.GetReason(), UnresolvedOnly: req.Msg.GetUnresolvedOnly(), Limit: int(req.Msg.GetLimit())}
	if f.Limit == 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 10000)
	if ts := req.Msg.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("since: %w", err))
		}
		f.Since = ts.AsTime()
	}
	entries, total, err := s.Coverage.List(ctx, f)
	if err != nil {
		return nil, storeErr(err)
	}
	resp := &debuginfov1.ListCoverageResponse{Total: uint64(total)}
	for _, e := range entries {
		c := e.Proto()
		c.Kernel = kernelpkg.Proto(e.Filenames)
		resp.Entries = append(resp.Entries, c)
	}
	return connect.NewResponse(resp), nil
}

// Delete implements the RPC.
func (s *Service) Delete(ctx context.Context, req *connect.Request[debuginfov1.DeleteRequest]) (*connect.Response[debuginfov1.DeleteResponse], error) {
	ids, err := s.lookupIDs(req.Msg.GetBuildId(), req.Msg.GetBuildIdType())
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		err := s.meta.Delete(ctx, id)
		if errors.Is(err, catalog.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, storeErr(err)
		}
		if s.Changed != nil {
			s.Changed()
		}
		s.log.Info("debuginfo deleted", "build_id", id.String())
		return connect.NewResponse(&debuginfov1.DeleteResponse{}), nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("nothing is stored under %s", req.Msg.GetBuildId()))
}

// PutHandler serves `PUT /upload/<upload_id>`: the body becomes the upload's object when it
// has exactly the declared size. It needs a write token: one of tokens, or, with tokens nil,
// what the caller checked before (a tenant's, see tenant.Access).
func (s *Service) PutHandler(tokens *auth.Tokens) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			w.Header().Set("Allow", http.MethodPut)
			http.Error(w, "use PUT", http.StatusMethodNotAllowed)
			return
		}
		if tokens != nil {
			if err := tokens.Check(r.Header.Get("Authorization")); err != nil {
				http.Error(w, err.Error(), auth.HTTPStatus(err))
				return
			}
		}
		id := strings.TrimPrefix(r.URL.Path, "/upload/")
		up, err := s.meta.PendingUpload(r.Context(), id)
		if errors.Is(err, catalog.ErrNotFound) {
			http.Error(w, "unknown or expired upload "+strconv.Quote(id), http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if r.ContentLength >= 0 && uint64(r.ContentLength) != up.Size {
			status := http.StatusBadRequest
			if uint64(r.ContentLength) > s.meta.MaxSize() {
				status = http.StatusRequestEntityTooLarge
			}
			http.Error(w, fmt.Sprintf("body of %d bytes; the upload declared %d", r.ContentLength, up.Size), status)
			return
		}
		// The store writes exactly Size bytes or nothing: a longer body is cut off by the
		// limit and caught by the size check at the end of Put.
		body := http.MaxBytesReader(w, r.Body, int64(up.Size))
		if err := s.meta.Store().Put(r.Context(), up.Object(), body, int64(up.Size)); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, fmt.Sprintf("body is larger than the declared %d bytes", up.Size), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "store upload: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// Every method of the service is implemented here: a method added to the API fails the build
// until it is.
var _ debuginfov1connect.DebuginfoServiceHandler = (*Service)(nil)
