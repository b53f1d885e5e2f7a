// The front <-> executor wire (services/api/front_protocol.h): the resume state round-trips through
// JSON, every malformed part is refused naming it, and a unit's header line says its payload's size.
#include "services/api/front_protocol.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace zipmoe::api {
namespace {

using nlohmann::json;

TEST(FrontProtocol, ResumeStateRoundTripsThroughJson) {
  ResumeState s;
  s.id = "chatcmpl-7";
  s.created = 1764370000;
  s.head_sent = true;
  s.choices.push_back(ChoiceResume{0, {{5, 17}, {300}}, false});
  s.choices.push_back(ChoiceResume{3, {{1}}, true});
  ResumeState back;
  std::string error;
  ASSERT_TRUE(ResumeFromJson(json::parse(ResumeToJson(s).dump()), &back, &error)) << error;
  EXPECT_EQ(back.id, s.id);
  EXPECT_EQ(back.created, s.created);
  EXPECT_TRUE(back.head_sent);
  ASSERT_EQ(back.choices.size(), 2u);
  EXPECT_EQ(back.choices[0].index, 0u);
  EXPECT_EQ(back.choices[0].groups, (std::vector<std::vector<int32_t>>{{5, 17}, {300}}));
  EXPECT_FALSE(back.choices[0].finished);
  EXPECT_EQ(back.choices[1].index, 3u);
  EXPECT_TRUE(back.choices[1].finished);
}

TEST(FrontProtocol, MalformedResumeStatesAreRefusedNamingTheField) {
  const json good = ResumeToJson(ResumeState{"cmpl-1", 1, false, {ChoiceResume{0, {{1, 2}}, false}}});
  struct Case {
    std::function<void(json&)> edit;
    std::string names;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j = json::array(); }, "zipmoe_resume must be an object"},
      {[](json& j) { j.erase("id"); }, "zipmoe_resume.id"},
      {[](json& j) { j["created"] = "soon"; }, "zipmoe_resume.created"},
      {[](json& j) { j["head"] = 1; }, "zipmoe_resume.head"},
      {[](json& j) { j["choices"] = json::object(); }, "zipmoe_resume.choices must be an array"},
      {[](json& j) { j["choices"][0]["index"] = -1; }, "zipmoe_resume.choices[0].index"},
      {[](json& j) { j["choices"][0]["groups"] = json::array({1}); }, "zipmoe_resume.choices[0].groups must hold arrays"},
      {[](json& j) { j["choices"][0]["groups"][0][1] = -5; }, "zipmoe_resume.choices[0].groups: -5 is not a token id"},
      {[](json& j) { j["choices"][0].erase("finished"); }, "zipmoe_resume.choices[0].finished"},
  };
  for (const Case& c : cases) {
    json j = good;
    c.edit(j);
    ResumeState out;
    std::string error;
    EXPECT_FALSE(ResumeFromJson(j, &out, &error)) << j.dump();
    EXPECT_NE(error.find(c.names), std::string::npos) << error;
  }
}

TEST(FrontProtocol, AUnitHeaderNamesItsKindAndPayloadBytes) {
  const std::string payload = "data: {\"x\":1}\n\n";
  const std::string header = UnitHeader(json{{"k", "tok"}, {"i", 2}, {"t", {7, 8}}, {"f", false}}, payload.size());
  ASSERT_EQ(header.rfind(std::string(kUnitPrefix), 0), 0u) << header;
  ASSERT_EQ(header.back(), '\n');
  ASSERT_EQ(header.find('\n'), header.size() - 1) << "one line";
  const json meta = json::parse(header.substr(kUnitPrefix.size()));
  EXPECT_EQ(meta["bytes"].get<size_t>(), payload.size());
  EXPECT_EQ(meta["k"], "tok");
  EXPECT_EQ(meta["t"], json::array({7, 8}));
}

}  // namespace
}  // namespace zipmoe::api
