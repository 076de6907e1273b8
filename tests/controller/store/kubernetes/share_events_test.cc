// What a share's status change is worth as a Kubernetes Event.
#include "controller/store/kubernetes/share_events.h"

#include <doctest/doctest.h>

namespace controller::kubernetes {
namespace {

namespace pb = sharemanager::controller::v1;

TEST_CASE("share events: the phase is the reason, the status' reason the message") {
  pb::ShareStatusRecord st;
  st.set_phase(pb::ERROR);
  st.set_reason(
      "pod share-manager-a-e1 Failed with exit code 3: exiting with code 3: ganesha died");
  const ShareEvent error = EventFor("a", st, 1234);
  CHECK(error.share == "a");
  CHECK(error.type == "Warning");
  CHECK(error.reason == "Error");
  CHECK(error.message == st.reason());
  CHECK(error.unix_ms == 1234);
  st.set_phase(pb::REPAIRING);
  CHECK(EventFor("a", st, 0).type == "Normal");
  CHECK(EventFor("a", st, 0).reason == "Repairing");
  st.set_phase(pb::PHASE_UNSPECIFIED);
  CHECK(EventFor("a", st, 0).reason == "Phase_unspecified");
}

}  // namespace
}  // namespace controller::kubernetes
