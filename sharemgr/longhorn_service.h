// Longhorn's ShareManagerService (proto/longhorn/smrpc.proto) mapped onto the
// same core as sharemanager.v1: Mount -> Mount (one more generation),
// Unmount -> Unmount, FilesystemTrim -> trim (the mounted filesystem is
// trimmed whether or not the device is encrypted), FilesystemResize -> resize.
// Longhorn carries no epoch, so these calls are unfenced (they pass the
// server's own): served only with --longhorn-compat.
#pragma once

#include "longhorn/smrpc.grpc.pb.h"
#include "sharemgr/share_service.h"

namespace sharemgr {

class LonghornService final : public ShareManagerService::Service {
 public:
  explicit LonghornService(ShareService& core) : core_(core) {}

  grpc::Status Mount(grpc::ServerContext* context, const google::protobuf::Empty* request,
                     google::protobuf::Empty* response) override;
  grpc::Status Unmount(grpc::ServerContext* context, const google::protobuf::Empty* request,
                       google::protobuf::Empty* response) override;
  grpc::Status FilesystemTrim(grpc::ServerContext* context, const FilesystemTrimRequest* request,
                              google::protobuf::Empty* response) override;
  grpc::Status FilesystemResize(grpc::ServerContext* context,
                                const google::protobuf::Empty* request,
                                google::protobuf::Empty* response) override;

 private:
  ShareService& core_;
};

}  // namespace sharemgr
