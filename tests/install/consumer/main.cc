// share-status ADDRESS: asks the share-manager at ADDRESS (host:port or
// unix:PATH) for its status, as a storage controller does, and prints it.
// Exit code 0 when the share is served, 1 when not, 2 when unreachable.
#include <iostream>

#include "controller/share_client.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  controller::ShareClient client(argv[1], {.deadline = std::chrono::seconds(3)});
  const auto status = client.GetStatus();
  if (!status.ok()) {
    std::cerr << "share-status: " << status.status() << "\n";
    return 2;
  }
  std::cout << status->volume() << " " << sharemanager::v1::ShareState_Name(status->state()) << " "
            << status->nfs_address() << ":" << status->nfs_port() << status->pseudo_path() << "\n";
  return status->state() == sharemanager::v1::SERVING ? 0 : 1;
}
