// libFuzzer target: a received service message frame (every body type of schemas/messages.fbs)
// through messaging::DecodeMessage, which verifies before it decodes. A frame that decodes must
// re-encode to a frame that decodes, and encoding is then a fixed point (decode(encode(m)) encodes
// to the same bytes; bytes, not operator==, so NaN doubles compare).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/ipc/messaging.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace messaging = zipmoe::messaging;
  auto message = messaging::DecodeMessage(data, size, "fuzz");
  if (!message.ok()) return 0;
  (void)messaging::BodyName(message->body);
  const std::string once = messaging::EncodeMessage(*message);
  auto again = messaging::DecodeMessage(once.data(), once.size(), "fuzz re-encoded");
  if (!again.ok()) zipmoe::fuzz::Fail("a decoded message does not decode after re-encoding: " + again.status().ToString());
  if (messaging::EncodeMessage(*again) != once) zipmoe::fuzz::Fail("message encoding is not a fixed point");
  return 0;
}
