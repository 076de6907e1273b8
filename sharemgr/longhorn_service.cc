#include "sharemgr/longhorn_service.h"

namespace sharemgr {

namespace v1 = sharemanager::v1;

grpc::Status LonghornService::Mount(grpc::ServerContext* context, const google::protobuf::Empty*,
                                    google::protobuf::Empty*) {
  v1::MountRequest request;
  request.set_epoch(core_.epoch());
  v1::MountResponse response;
  return core_.Mount(context, &request, &response);
}

grpc::Status LonghornService::Unmount(grpc::ServerContext* context, const google::protobuf::Empty*,
                                      google::protobuf::Empty*) {
  v1::UnmountRequest request;
  request.set_epoch(core_.epoch());
  v1::UnmountResponse response;
  return core_.Unmount(context, &request, &response);
}

grpc::Status LonghornService::FilesystemTrim(grpc::ServerContext* context,
                                             const FilesystemTrimRequest*,
                                             google::protobuf::Empty*) {
  v1::FilesystemTrimRequest request;
  request.set_epoch(core_.epoch());
  v1::FilesystemTrimResponse response;
  return core_.FilesystemTrim(context, &request, &response);
}

grpc::Status LonghornService::FilesystemResize(grpc::ServerContext* context,
                                               const google::protobuf::Empty*,
                                               google::protobuf::Empty*) {
  v1::FilesystemResizeRequest request;
  request.set_epoch(core_.epoch());
  v1::FilesystemResizeResponse response;
  return core_.FilesystemResize(context, &request, &response);
}

}  // namespace sharemgr
